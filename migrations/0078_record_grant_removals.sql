-- When each principal's grant on each repository was last removed. Granting it again restores the
-- principal's access, not the pre-signed links made before the removal: an operator removes a grant
-- to kill what it gave (a leaked link included) and may grant again later for new work
-- (docs/clients.md, docs/auth.md). Written by a trigger in the statement that removes the grant, so
-- every path (admin API, CLI, console, a repository's cascade, plain SQL) records it; kept when the
-- grant is given back. Only a removal counts: every permission (read, write) reads, so changing one
-- takes no read access away.
-- - No FK to arkvory_repositories: a repository deleted and created again under the name keeps its
--   removals (its old links named the same paths).
-- - An FK to arkvory_principals (ON DELETE CASCADE): a deleted principal's keys are gone, and its
--   links with them. Its grants' cascade records nothing (the principal is no longer there).
-- - Like disabled_at, the stamp is the database's clock, the one that dates a link (X-Arkvory-Date):
--   the moment the row goes (clock_timestamp), not its transaction's start: a link made after a
--   longer transaction began but before it removed the grant counts as made before the removal.
-- The trigger runs as the schema owner, like the epoch triggers (0020): no runtime role writes this
-- table; the gateways read it with the grants (the grants' own trigger clears their caches).
CREATE TABLE arkvory_grant_removals (
  principal_id uuid NOT NULL REFERENCES arkvory_principals (id) ON DELETE CASCADE,
  repository text NOT NULL,
  removed_at timestamptz NOT NULL,
  PRIMARY KEY (principal_id, repository)
);

CREATE FUNCTION arkvory_grant_removed() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.principal_id = NEW.principal_id AND OLD.repository = NEW.repository THEN
    RETURN NULL;
  END IF;
  INSERT INTO arkvory_grant_removals AS r (principal_id, repository, removed_at)
  SELECT OLD.principal_id, OLD.repository, clock_timestamp()
    FROM arkvory_principals p WHERE p.id = OLD.principal_id
  ON CONFLICT (principal_id, repository) DO UPDATE SET removed_at = greatest(r.removed_at, EXCLUDED.removed_at);
  RETURN NULL;
END $$;
REVOKE EXECUTE ON FUNCTION arkvory_grant_removed() FROM PUBLIC;

CREATE TRIGGER arkvory_grants_removed AFTER DELETE OR UPDATE OF principal_id, repository ON arkvory_grants
  FOR EACH ROW EXECUTE FUNCTION arkvory_grant_removed();
-- A restore (or maintenance SQL) that writes removals reaches every gateway's cache as a grant does.
CREATE TRIGGER arkvory_grant_removals_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_grant_removals
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
