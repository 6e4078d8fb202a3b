-- Leased download shares follow the bandwidth weights (issue 40, docs/shared-profile.md "Weighted
-- shares"). Each lease row holds the weight sum its gateway reported (the weights of the principals
-- it is serving, at least 1, at most 1000) and the share it may be using (held_bytes_per_second).
-- arkvory_lease_share renews the lease like arkvory_lease_renew and answers the gateway's new share:
--   target = max(1, floor(rate × own weight sum / W)), W = the weight sums of every unexpired lease,
--            plus 1 for every other slot (free, or taken but not yet renewed), so a starting gateway
--            finds room;
--   share  = min(target, rate − the shares the other unexpired leases hold);
--   held   = max(the share the gateway applies now, the new share): a lowered share is held until
--            the gateway applies it (its next call says so), so the shares in use never add up to
--            more than the rate, whatever order the renewals run in (they are serialised on the
--            policy row). An expired lease holds nothing: its owner fenced itself 2 s earlier.
-- NULL: no unexpired lease of this owner, generation and session (the caller is fenced).
ALTER TABLE arkvory_gateway_leases
  ADD COLUMN weight_sum integer NOT NULL DEFAULT 1 CHECK (weight_sum BETWEEN 1 AND 1000),
  ADD COLUMN held_bytes_per_second bigint NOT NULL DEFAULT 0 CHECK (held_bytes_per_second >= 0);

CREATE FUNCTION arkvory_lease_share(p_slot integer, p_owner uuid, p_generation bigint, p_reservation_ms double precision,
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
  PERFORM 1 FROM arkvory_gateway_leases
    WHERE slot = p_slot AND owner = p_owner AND generation = p_generation AND expires_at > clock_timestamp()
      AND holder_pid = pg_backend_pid()
      AND holder_started_at IS NOT DISTINCT FROM (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid());
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT coalesce(sum(CASE WHEN held_bytes_per_second > 0 THEN weight_sum ELSE 1 END), 0),
         coalesce(sum(held_bytes_per_second), 0), count(*)
    INTO v_others_weight, v_others_held, v_others_live
    FROM arkvory_gateway_leases WHERE slot <> p_slot AND expires_at > clock_timestamp();
  v_share := least(
    greatest(1, (v_rate * v_weight) / (v_weight + v_others_weight + (v_slots - 1 - v_others_live))),
    v_rate - v_others_held);
  UPDATE arkvory_gateway_leases SET renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => p_reservation_ms / 1000),
    weight_sum = v_weight,
    held_bytes_per_second = greatest(v_share, least(p_current_bytes_per_second, v_rate))
    WHERE slot = p_slot;
  RETURN v_share;
END $$;

REVOKE EXECUTE ON FUNCTION arkvory_lease_share(integer, uuid, bigint, double precision, integer, bigint) FROM PUBLIC;
