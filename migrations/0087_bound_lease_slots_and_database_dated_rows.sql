-- Two holes in what the runtime roles may do through, or beside, the owner's functions:
--
-- 1. arkvory_lease_acquire took any slot the table's CHECK allows (0..15), whatever the stored
--    policy's SLOTS: only the gateway's own config kept a slot below it. A login allowed to take a
--    lease (a reader's, or a misconfigured gateway's) could hold slot 7 of a 3-slot policy beside
--    slots 0..2, a gateway the share computation (0061/0079) does not count among the SLOTS, and the
--    router would send it traffic. Now the slot must be below the stored SLOTS (an acquire without a
--    stored policy is refused too: every gateway stores or checks it before taking its lease); renew
--    and share answer "not yours" (false/NULL) for a row beyond it, as they do for a lease the
--    caller may not hold (0074), so such a row left from before this migration lapses within a minute.
--
-- 2. Rows some runtime roles could date themselves:
--    - arkvory_artifacts: the writer and the worker held table-wide INSERT, so a compromised one
--      could publish with any created_at (the Last-Modified and If-Modified-Since answers, the
--      catalog's guard on a delete, `stats` idle listings); the catalog's insert names every column
--      but created_at, which the database (and 0075's trigger) dates;
--    - arkvory_principal_groups: the writer held table-wide UPDATE, created_at (and a group's name)
--      included; its admin commands change only the two ceilings;
--    - arkvory_storage_quotas: likewise table-wide UPDATE; `quota set` changes the limit and its
--      updated_at only.
--    `migrate` re-applies migrations/grants.ts after this migration once `db roles` has made the
--    roles; this does the same for these tables, so it holds whoever runs it (as 0080 does for the
--    audit trail). Without the roles (no `db roles` yet) there is nothing to change.
--
-- Same signatures, owner, SECURITY DEFINER and search_path as 0074/0079: the function grants and
-- the REVOKEs from PUBLIC stay.

CREATE OR REPLACE FUNCTION arkvory_lease_acquire(p_slot integer, p_owner uuid, p_role text, p_advertise_url text, p_reservation_ms double precision)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_generation bigint;
  v_slots integer;
BEGIN
  IF NOT arkvory_lease_may_take(p_slot, p_role) THEN
    RAISE EXCEPTION 'slot % with role % is the writer''s: login % is not a member of arkvory_writer', p_slot, p_role, session_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT slots INTO v_slots FROM arkvory_download_policy;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no shared download policy is stored: slot % cannot be leased', p_slot
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF p_slot IS NULL OR p_slot < 0 OR p_slot >= v_slots THEN
    RAISE EXCEPTION 'slot % is not below the stored policy''s SLOTS (%)', p_slot, v_slots
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
      AND slot < (SELECT slots FROM arkvory_download_policy)
    RETURNING 1)
  SELECT count(*) > 0 FROM renewed
$$;

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
  -- A slot the policy does not have (a row taken before acquire checked it) gets no share.
  IF p_slot >= v_slots THEN RETURN NULL; END IF;
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

DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['arkvory_writer', 'arkvory_worker'] LOOP
    IF to_regrole(r) IS NOT NULL THEN
      -- Table-level REVOKE also takes the column grants: only the catalog's columns are given back.
      EXECUTE format('REVOKE INSERT ON TABLE arkvory_artifacts FROM %I', r);
      EXECUTE format(
        'GRANT INSERT (repository, kind, name, version, asset, sha256, size_bytes, content_type, published_by) '
        'ON TABLE arkvory_artifacts TO %I', r);
    END IF;
  END LOOP;
  IF to_regrole('arkvory_writer') IS NOT NULL THEN
    REVOKE UPDATE ON TABLE arkvory_principal_groups FROM arkvory_writer;
    GRANT UPDATE (download_bytes_per_second, upload_bytes_per_second) ON TABLE arkvory_principal_groups TO arkvory_writer;
    REVOKE UPDATE ON TABLE arkvory_storage_quotas FROM arkvory_writer;
    GRANT UPDATE (limit_bytes, updated_at) ON TABLE arkvory_storage_quotas TO arkvory_writer;
  END IF;
END
$$;
