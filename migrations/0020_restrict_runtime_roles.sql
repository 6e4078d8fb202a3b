-- Least privilege (docs/deploy.md, `arkvory db roles`): runtime roles get row and column grants only,
-- so what they must do beyond them runs here, as the schema owner, and no further:
-- - the epoch triggers bump their epoch as the owner (a writer deleting an artifact needs no UPDATE
--   on arkvory_catalog_epoch; a reader needs none at all);
-- - a gateway takes a slot lease only when it is free or expired, and renews only the lease its own
--   database session took (owner, generation and backend): no runtime role may UPDATE or DELETE a
--   lease row directly. Assumes 0004 (leases) and 0002/0009 (the epoch functions).
ALTER FUNCTION arkvory_auth_changed() SECURITY DEFINER SET search_path = pg_catalog, public;
ALTER FUNCTION arkvory_catalog_changed() SECURITY DEFINER SET search_path = pg_catalog, public;

-- The session that holds a lease: its backend pid and start time (a pid alone is reused).
ALTER TABLE arkvory_gateway_leases ADD COLUMN holder_pid integer, ADD COLUMN holder_started_at timestamptz;

CREATE FUNCTION arkvory_lease_acquire(p_slot integer, p_owner uuid, p_role text, p_advertise_url text, p_reservation_ms double precision)
RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  INSERT INTO arkvory_gateway_leases AS l (slot, owner, generation, role, advertise_url, acquired_at, renewed_at, expires_at, holder_pid, holder_started_at)
  VALUES (p_slot, p_owner, 1, p_role, p_advertise_url, clock_timestamp(), clock_timestamp(),
          clock_timestamp() + make_interval(secs => p_reservation_ms / 1000), pg_backend_pid(),
          (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()))
  ON CONFLICT (slot) DO UPDATE SET owner = EXCLUDED.owner, generation = l.generation + 1, role = EXCLUDED.role,
    advertise_url = EXCLUDED.advertise_url, acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at, holder_pid = EXCLUDED.holder_pid, holder_started_at = EXCLUDED.holder_started_at
  WHERE l.expires_at <= clock_timestamp()
  RETURNING generation
$$;

CREATE FUNCTION arkvory_lease_renew(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH renewed AS (
    UPDATE arkvory_gateway_leases SET renewed_at = clock_timestamp(),
      expires_at = clock_timestamp() + make_interval(secs => p_reservation_ms / 1000)
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation AND expires_at > clock_timestamp()
      AND holder_pid = pg_backend_pid()
      AND holder_started_at IS NOT DISTINCT FROM (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
    RETURNING 1)
  SELECT count(*) > 0 FROM renewed
$$;

-- Only the roles granted EXECUTE by `arkvory db roles` (and the owner) may call them.
REVOKE EXECUTE ON FUNCTION arkvory_lease_acquire(integer, uuid, text, text, double precision) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION arkvory_lease_renew(integer, uuid, bigint, double precision) FROM PUBLIC;
