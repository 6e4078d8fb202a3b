-- Principals (service accounts), API keys, repositories and grants.
-- Guarantees: a key row never holds the secret (only its sha256); every change that can revoke
-- access bumps arkvory_auth_epoch and NOTIFYs arkvory_auth, so caches on every gateway drop it.
CREATE TABLE arkvory_principals (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$'),
  disabled boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE arkvory_api_keys (
  key_id text PRIMARY KEY CHECK (key_id ~ '^[a-z0-9]{16}$'),
  principal_id uuid NOT NULL REFERENCES arkvory_principals (id) ON DELETE CASCADE,
  kind text NOT NULL DEFAULT 'service' CHECK (kind IN ('service', 'personal')),
  secret_sha256 bytea NOT NULL CHECK (length(secret_sha256) = 32),
  scopes text[] NOT NULL CHECK (scopes <@ ARRAY['read', 'write', 'admin']::text[] AND cardinality(scopes) > 0),
  description text,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz
);
CREATE INDEX arkvory_api_keys_principal ON arkvory_api_keys (principal_id);

CREATE TABLE arkvory_repositories (
  name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE arkvory_grants (
  principal_id uuid NOT NULL REFERENCES arkvory_principals (id) ON DELETE CASCADE,
  repository text NOT NULL REFERENCES arkvory_repositories (name) ON DELETE CASCADE,
  permission text NOT NULL CHECK (permission IN ('read', 'write')),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (principal_id, repository)
);

CREATE TABLE arkvory_auth_epoch (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  epoch bigint NOT NULL
);
INSERT INTO arkvory_auth_epoch (singleton, epoch) VALUES (true, 0);

CREATE FUNCTION arkvory_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE arkvory_auth_epoch SET epoch = epoch + 1;
  PERFORM pg_notify('arkvory_auth', '');
  RETURN NULL;
END $$;

-- last_used_at updates do not count: they change nothing a cache holds.
CREATE TRIGGER arkvory_api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF revoked_at, expires_at, scopes, secret_sha256, principal_id
  ON arkvory_api_keys FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
CREATE TRIGGER arkvory_principals_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_principals
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
CREATE TRIGGER arkvory_grants_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_grants
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
CREATE TRIGGER arkvory_repositories_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_repositories
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
