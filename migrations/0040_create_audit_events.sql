-- The audit trail: one row per mutating or administrative action, appended and never changed.
-- Guarantees: no runtime role may UPDATE or DELETE a row (migrations/grants.ts gives INSERT and
-- SELECT only); rows older than the retention go only through arkvory_audit_prune, which runs as
-- the owner and deletes nothing younger than one day, whatever its caller asks. Restore from a
-- backup leaves the trail as it is (storage-adapter/backup: recorded, not restored).
CREATE TABLE arkvory_audit_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  action text NOT NULL CHECK (action ~ '^[a-z][a-z_]*(\.[a-z][a-z_]*)+$' AND length(action) <= 64),
  -- Who: a principal (the admin API, a write) or the operator of a CLI command (OS user and host).
  actor_kind text NOT NULL CHECK (actor_kind IN ('principal', 'operator')),
  principal_id uuid,
  principal_name text CHECK (length(principal_name) <= 128),
  operator text CHECK (length(operator) <= 256),
  host text CHECK (length(host) <= 256),
  -- From where: the client address (API) or `cli`.
  source text NOT NULL CHECK (length(source) <= 128),
  request_id text CHECK (length(request_id) <= 64),
  target jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(target) = 'object'),
  details jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(details) = 'object'),
  CHECK ((actor_kind = 'principal') = (principal_id IS NOT NULL)),
  CHECK ((actor_kind = 'operator') = (operator IS NOT NULL))
);
CREATE INDEX arkvory_audit_events_at ON arkvory_audit_events (at);
CREATE INDEX arkvory_audit_events_principal ON arkvory_audit_events (principal_id, id) WHERE principal_id IS NOT NULL;

-- Removes rows older than p_keep_days (at least 1) and returns how many went.
CREATE FUNCTION arkvory_audit_prune(p_keep_days integer) RETURNS bigint LANGUAGE sql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH gone AS (
    DELETE FROM arkvory_audit_events
     WHERE at < clock_timestamp() - make_interval(days => greatest(p_keep_days, 1))
    RETURNING 1)
  SELECT count(*) FROM gone
$$;

REVOKE EXECUTE ON FUNCTION arkvory_audit_prune(integer) FROM PUBLIC;
