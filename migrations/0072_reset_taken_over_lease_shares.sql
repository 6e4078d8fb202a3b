-- A slot taken over must not hold its dead owner's share, and no answer may be negative.
-- Until now arkvory_lease_acquire (0020) kept held_bytes_per_second and weight_sum when it took an
-- expired slot: the row was unexpired again and held the dead owner's share for the new owner, on
-- top of the shares the live gateways had been granted while it lay expired. The others' next
-- arkvory_lease_share (0061) then computed rate − held < 0 and answered it; the gateway reported
-- that share back as the one in use, the CHECK on held_bytes_per_second refused every renewal, and
-- every gateway fenced (one reader dying between its acquire and its first share request was enough).
-- Now:
-- - acquire, inserting or taking over, starts the row holding nothing at the neutral weight sum
--   (held 0, weight_sum 1: the defaults of 0061), like a slot never used;
-- - the share is never below 0 (0 pauses downloads until the next answer);
-- - the share's row update matches the caller's owner and generation, on the lease row it locked
--   when it checked them, so a renewal can never write another owner's row.
-- Same signatures, owner, SECURITY DEFINER and search_path: CREATE OR REPLACE keeps the grants
-- (migrations/grants.ts) and the REVOKE from PUBLIC of 0020 and 0061.
CREATE OR REPLACE FUNCTION arkvory_lease_acquire(p_slot integer, p_owner uuid, p_role text, p_advertise_url text, p_reservation_ms double precision)
RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  INSERT INTO arkvory_gateway_leases AS l (slot, owner, generation, role, advertise_url, acquired_at, renewed_at, expires_at,
                                           holder_pid, holder_started_at, weight_sum, held_bytes_per_second)
  VALUES (p_slot, p_owner, 1, p_role, p_advertise_url, clock_timestamp(), clock_timestamp(),
          clock_timestamp() + make_interval(secs => p_reservation_ms / 1000), pg_backend_pid(),
          (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), 1, 0)
  ON CONFLICT (slot) DO UPDATE SET owner = EXCLUDED.owner, generation = l.generation + 1, role = EXCLUDED.role,
    advertise_url = EXCLUDED.advertise_url, acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at, holder_pid = EXCLUDED.holder_pid, holder_started_at = EXCLUDED.holder_started_at,
    weight_sum = EXCLUDED.weight_sum, held_bytes_per_second = EXCLUDED.held_bytes_per_second
  WHERE l.expires_at <= clock_timestamp()
  RETURNING generation
$$;

CREATE OR REPLACE FUNCTION arkvory_lease_share(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision,
                                               p_weight_sum integer, p_current_bytes_per_second bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_rate bigint;
  v_slots integer;
  v_weight integer := least(1000, greatest(1, p_weight_sum));
  v_others_weight bigint;
  v_others_held bigint;
  v_others_live integer;
  v_share bigint;
BEGIN
  -- One share computation at a time: the others' held shares must not change under this one.
  SELECT download_bytes_per_second, slots INTO v_rate, v_slots FROM arkvory_download_policy FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  -- Locked: no acquire can take the slot over between this check and the update below.
  PERFORM 1 FROM arkvory_gateway_leases
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation AND expires_at > clock_timestamp()
      AND holder_pid = pg_backend_pid()
      AND holder_started_at IS NOT DISTINCT FROM (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
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
    expires_at = clock_timestamp() + make_interval(secs => p_reservation_ms / 1000),
    weight_sum = v_weight,
    held_bytes_per_second = greatest(v_share, least(p_current_bytes_per_second, v_rate))
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation;
  IF NOT FOUND THEN RETURN NULL; END IF;
  RETURN v_share;
END $$;
