-- Finished multipart sessions (done, failed, aborted, expired) are deleted some days after they
-- finished, their parts' rows and their completion job with them (ON DELETE CASCADE, 0006): until
-- now every session ever opened stayed, so a writer opening and aborting sessions in a loop grew
-- these tables without bound. Runtime roles get no DELETE on the sessions; the completion worker
-- prunes through this owner's function, which never deletes an open or completing session nor one
-- finished less than a day ago, whatever its caller asks, and at most p_limit rows per call.
-- Assumes 0006 (arkvory_upload_sessions).
CREATE INDEX arkvory_upload_sessions_finished ON arkvory_upload_sessions (finished_at)
  WHERE finished_at IS NOT NULL;

CREATE FUNCTION arkvory_upload_sessions_prune(p_keep_days integer, p_limit integer) RETURNS bigint LANGUAGE sql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH gone AS (
    DELETE FROM arkvory_upload_sessions
     WHERE id IN (
       SELECT id FROM arkvory_upload_sessions
        WHERE finished_at < clock_timestamp() - make_interval(days => greatest(p_keep_days, 1))
          AND state IN ('done', 'failed', 'aborted', 'expired')
        ORDER BY finished_at
        LIMIT greatest(p_limit, 1))
    RETURNING 1)
  SELECT count(*) FROM gone
$$;

REVOKE EXECUTE ON FUNCTION arkvory_upload_sessions_prune(integer, integer) FROM PUBLIC;
