-- Groups of principals and repositories with their own bandwidth ceilings (issue 40,
-- docs/bandwidth-and-admission.md "Group and repository ceilings"). A transfer is paced by every
-- bucket it belongs to: the direction's, each of its principal's groups', its repository's and its
-- principal's. 0 = no ceiling; otherwise 65536 B/s .. 1 TiB/s, like the shared rates. A repository
-- may also bound its concurrent transfers (0 = no bound). Every change bumps the auth epoch, so the
-- gateways' key and grant caches, which carry these ceilings, drop them within 2 s.
CREATE TABLE arkvory_principal_groups (
  name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$'),
  download_bytes_per_second bigint NOT NULL DEFAULT 0
    CHECK (download_bytes_per_second = 0 OR download_bytes_per_second BETWEEN 65536 AND 1099511627776),
  upload_bytes_per_second bigint NOT NULL DEFAULT 0
    CHECK (upload_bytes_per_second = 0 OR upload_bytes_per_second BETWEEN 65536 AND 1099511627776),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE arkvory_principal_group_members (
  group_name text NOT NULL REFERENCES arkvory_principal_groups (name) ON DELETE CASCADE,
  principal_id uuid NOT NULL REFERENCES arkvory_principals (id) ON DELETE CASCADE,
  PRIMARY KEY (group_name, principal_id)
);
CREATE INDEX arkvory_principal_group_members_principal ON arkvory_principal_group_members (principal_id);

ALTER TABLE arkvory_repositories
  ADD COLUMN download_bytes_per_second bigint NOT NULL DEFAULT 0
    CHECK (download_bytes_per_second = 0 OR download_bytes_per_second BETWEEN 65536 AND 1099511627776),
  ADD COLUMN upload_bytes_per_second bigint NOT NULL DEFAULT 0
    CHECK (upload_bytes_per_second = 0 OR upload_bytes_per_second BETWEEN 65536 AND 1099511627776),
  ADD COLUMN max_transfers integer NOT NULL DEFAULT 0 CHECK (max_transfers BETWEEN 0 AND 100000);

CREATE TRIGGER arkvory_principal_groups_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_principal_groups
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
CREATE TRIGGER arkvory_principal_group_members_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_principal_group_members
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
