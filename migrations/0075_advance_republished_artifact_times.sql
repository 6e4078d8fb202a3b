-- A name deleted and published again gets a created_at (its Last-Modified, whole seconds) strictly
-- after every earlier version's: a client revalidating the old version with If-Modified-Since
-- alone must get the new bytes (200), never a 304 for a version published within the same second.
-- Both triggers run in the statement that deletes or inserts, so every path (DELETE, compare and
-- delete, a repository's cascade, maintenance SQL, a restore) keeps the rule.
-- - a deleted row's created_at is kept here for a minute (a publish reaches the catalog well within
--   it); rows older than that need no entry: the clock alone puts a new version in a later second;
-- - an insert takes the second after the latest kept one, and after a row it sees under the key:
--   that row can only be one whose delete is not committed yet, which the insert then waits for.
-- No FK to arkvory_repositories: a repository deleted and created again keeps the rule too.
-- The triggers run as the schema owner, like the epoch triggers (0020): no runtime role needs this
-- table. A created_at may so be up to a second ahead of the clock per re-publish within a second.
CREATE TABLE arkvory_artifact_tombstones (
  repository text NOT NULL,
  kind text NOT NULL,
  name text NOT NULL,
  version text NOT NULL,
  asset text NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (repository, kind, name, version, asset)
);
CREATE INDEX arkvory_artifact_tombstones_created_at ON arkvory_artifact_tombstones (created_at);

CREATE FUNCTION arkvory_artifact_deleted() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF OLD.created_at >= now() - interval '1 minute' THEN
    DELETE FROM arkvory_artifact_tombstones WHERE created_at < now() - interval '1 minute';
    INSERT INTO arkvory_artifact_tombstones AS t (repository, kind, name, version, asset, created_at)
    VALUES (OLD.repository, OLD.kind, OLD.name, OLD.version, OLD.asset, OLD.created_at)
    ON CONFLICT (repository, kind, name, version, asset) DO UPDATE
      SET created_at = greatest(t.created_at, EXCLUDED.created_at);
  END IF;
  RETURN OLD;
END $$;
REVOKE EXECUTE ON FUNCTION arkvory_artifact_deleted() FROM PUBLIC;

CREATE FUNCTION arkvory_artifact_created_at() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_earlier timestamptz;
BEGIN
  SELECT max(created_at) INTO v_earlier FROM (
    SELECT created_at FROM arkvory_artifact_tombstones
      WHERE repository = NEW.repository AND kind = NEW.kind AND name = NEW.name AND version = NEW.version AND asset = NEW.asset
    UNION ALL
    SELECT created_at FROM arkvory_artifacts
      WHERE repository = NEW.repository AND kind = NEW.kind AND name = NEW.name AND version = NEW.version AND asset = NEW.asset
  ) earlier;
  IF v_earlier IS NOT NULL THEN
    NEW.created_at := greatest(NEW.created_at, date_trunc('second', v_earlier) + interval '1 second');
  END IF;
  RETURN NEW;
END $$;
REVOKE EXECUTE ON FUNCTION arkvory_artifact_created_at() FROM PUBLIC;

CREATE TRIGGER arkvory_artifacts_tombstone BEFORE DELETE ON arkvory_artifacts
  FOR EACH ROW EXECUTE FUNCTION arkvory_artifact_deleted();
CREATE TRIGGER arkvory_artifacts_created_at BEFORE INSERT ON arkvory_artifacts
  FOR EACH ROW EXECUTE FUNCTION arkvory_artifact_created_at();
