-- A gateway's weight sum (0061) is the sum of the bandwidth weights of the principals it serves, up
-- to 1000 principals (the governor's table) at weights up to 1000: it was cut at 1000, the largest
-- weight of one principal, so a gateway serving principals whose weights add up past 1000 was
-- answered the share of 1000. Two principals of weight 1000 on one gateway then shared half of the
-- rate between them beside one of weight 1000 alone on another gateway, which had the other half
-- (docs/shared-profile.md, "Weighted shares"). The bound is now 1000 × 1000. The product rate ×
-- weight sum is taken in numeric: a configured rate (at most 2^40) times 1,000,000 fits a bigint, but
-- arkvory_download_policy bounds its rate by nothing, and an overflow would fail every renewal. Same
-- signature, owner, SECURITY DEFINER and search_path as 0074: the grants (migrations/grants.ts) and
-- the REVOKE from PUBLIC stay.
ALTER TABLE arkvory_gateway_leases DROP CONSTRAINT arkvory_gateway_leases_weight_sum_check;
ALTER TABLE arkvory_gateway_leases
  ADD CONSTRAINT arkvory_gateway_leases_weight_sum_check CHECK (weight_sum BETWEEN 1 AND 1000000);

CREATE OR REPLACE FUNCTION arkvory_lease_share(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision,
                                               p_weight_sum integer, p_current_bytes_per_second bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_rate bigint;
  v_slots integer;
  v_weight integer := least(1000000, greatest(1, p_weight_sum));
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
    greatest(1, floor(v_rate::numeric * v_weight / (v_weight + v_others_weight + (v_slots - 1 - v_others_live)))::bigint),
    v_rate - v_others_held));
  UPDATE arkvory_gateway_leases SET renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + arkvory_lease_reservation(p_reservation_ms),
    weight_sum = v_weight,
    held_bytes_per_second = greatest(v_share, least(p_current_bytes_per_second, v_rate, v_held))
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation;
  IF NOT FOUND THEN RETURN NULL; END IF;
  RETURN v_share;
END $$;
