-- The lease functions run as the schema owner (0020), so they must check who calls them: the
-- writer's slot is where routers send every write, admin and console request (slot 0 with role
-- `api`, proxy/router/discovery.ts), so only a login allowed to be the writer may take or keep it.
-- - slot 0, or role `api`: only a session whose login is a member of arkvory_writer, or of the
--   schema owner (who may write the table directly anyway), or a superuser; without `db roles`
--   (no arkvory_writer role) every login is the owner's and the check passes. Anyone else gets
--   SQLSTATE 42501 from acquire, and renew/share answer "not yours" (false/NULL);
-- - the reservation is at most 60 s (gateways ask for 10 s, policy/lease/lease-permit.ts), so no
--   caller can hold a slot past a minute without renewing it; leases already reaching further are
--   cut to a minute from now;
-- - the share in use a gateway reports (held until it applies a lowered share, 0061) is at most
--   what its row already holds: a gateway applies only shares it was answered, all held there.
-- Same signatures, owner, SECURITY DEFINER and search_path as 0020/0061/0072: the grants
-- (migrations/grants.ts) and the REVOKEs from PUBLIC stay.

CREATE FUNCTION arkvory_lease_may_take(p_slot integer, p_role text)
RETURNS boolean LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF p_slot <> 0 AND p_role IS DISTINCT FROM 'api' THEN RETURN true; END IF;
  IF to_regrole('arkvory_writer') IS NULL THEN RETURN true; END IF;
  -- current_user is this function's owner, the schema owner.
  RETURN pg_has_role(session_user, 'arkvory_writer', 'MEMBER') OR pg_has_role(session_user, current_user, 'MEMBER');
END $$;
REVOKE EXECUTE ON FUNCTION arkvory_lease_may_take(integer, text) FROM PUBLIC;

CREATE FUNCTION arkvory_lease_reservation(p_reservation_ms double precision)
RETURNS interval LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
  -- NaN sorts above every number in PostgreSQL, so it is clamped to the maximum too.
  SELECT make_interval(secs => greatest(0, least(coalesce(p_reservation_ms, 0), 60000)) / 1000)
$$;
REVOKE EXECUTE ON FUNCTION arkvory_lease_reservation(double precision) FROM PUBLIC;

UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() + interval '60 seconds'
  WHERE expires_at > clock_timestamp() + interval '60 seconds';

CREATE OR REPLACE FUNCTION arkvory_lease_acquire(p_slot integer, p_owner uuid, p_role text, p_advertise_url text, p_reservation_ms double precision)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_generation bigint;
BEGIN
  IF NOT arkvory_lease_may_take(p_slot, p_role) THEN
    RAISE EXCEPTION 'slot % with role % is the writer''s: login % is not a member of arkvory_writer', p_slot, p_role, session_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  INSERT INTO arkvory_gateway_leases AS l (slot, owner, generation, role, advertise_url, acquired_at, renewed_at, expires_at,
                                           holder_pid, holder_started_at, weight_sum, held_bytes_per_second)
  VALUES (p_slot, p_owner, 1, p_role, p_advertise_url, clock_timestamp(), clock_timestamp(),
          clock_timestamp() + arkvory_lease_reservation(p_reservation_ms), pg_backend_pid(),
          (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), 1, 0)
  ON CONFLICT (slot) DO UPDATE SET owner = EXCLUDED.owner, generation = l.generation + 1, role = EXCLUDED.role,
    advertise_url = EXCLUDED.advertise_url, acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at, holder_pid = EXCLUDED.holder_pid, holder_started_at = EXCLUDED.holder_started_at,
    weight_sum = EXCLUDED.weight_sum, held_bytes_per_second = EXCLUDED.held_bytes_per_second
  WHERE l.expires_at <= clock_timestamp()
  RETURNING generation INTO v_generation;
  RETURN v_generation;
END $$;

CREATE OR REPLACE FUNCTION arkvory_lease_renew(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH renewed AS (
    UPDATE arkvory_gateway_leases SET renewed_at = clock_timestamp(),
      expires_at = clock_timestamp() + arkvory_lease_reservation(p_reservation_ms)
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation AND expires_at > clock_timestamp()
      AND holder_pid = pg_backend_pid()
      AND holder_started_at IS NOT DISTINCT FROM (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
      AND arkvory_lease_may_take(slot, role)
    RETURNING 1)
  SELECT count(*) > 0 FROM renewed
$$;

CREATE OR REPLACE FUNCTION arkvory_lease_share(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision,
                                               p_weight_sum integer, p_current_bytes_per_second bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_rate bigint;
  v_slots integer;
  v_weight integer := least(1000, greatest(1, p_weight_sum));
  v_held bigint;
  v_others_weight bigint;
  v_others_held bigint;
  v_others_live integer;
  v_share bigint;
BEGIN
  -- One share computation at a time: the others' held shares must not change under this one.
  SELECT download_bytes_per_second, slots INTO v_rate, v_slots FROM arkvory_download_policy FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  -- Locked: no acquire can take the slot over between this check and the update below.
  SELECT held_bytes_per_second INTO v_held FROM arkvory_gateway_leases
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation AND expires_at > clock_timestamp()
      AND holder_pid = pg_backend_pid()
      AND holder_started_at IS NOT DISTINCT FROM (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
      AND arkvory_lease_may_take(slot, role)
    FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT coalesce(sum(CASE WHEN held_bytes_per_second > 0 THEN weight_sum ELSE 1 END), 0),
         coalesce(sum(held_bytes_per_second), 0), count(*)
    INTO v_others_weight, v_others_held, v_others_live
    FROM arkvory_gateway_leases WHERE slot <> p_slot AND expires_at > clock_timestamp();
  v_share := greatest(0, least(
    greatest(1, (v_rate * v_weight) / (v_weight + v_others_weight + (v_slots - 1 - v_others_live))),
    v_rate - v_others_held));
  UPDATE arkvory_gateway_leases SET renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + arkvory_lease_reservation(p_reservation_ms),
    weight_sum = v_weight,
    held_bytes_per_second = greatest(v_share, least(p_current_bytes_per_second, v_rate, v_held))
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation;
  IF NOT FOUND THEN RETURN NULL; END IF;
  RETURN v_share;
END $$;
