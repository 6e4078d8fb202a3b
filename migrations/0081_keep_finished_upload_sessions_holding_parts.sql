-- A finished multipart session still holding part rows is not pruned: those rows are what name its
-- part files to the worker's sweep, which retries their removal every 30 s (removal failed: the
-- store refusing or unreachable). Deleted with the session after its 7 days, the rows went and the
-- files stayed on the store, named by nothing, until an operator ran offline gc. Such a session is
-- now kept until the sweep has removed its parts. Same signature, owner, SECURITY DEFINER and
-- search_path as 0071: the grants (migrations/grants.ts) and the REVOKE from PUBLIC stay.
CREATE OR REPLACE FUNCTION arkvory_upload_sessions_prune(p_keep_days integer, p_limit integer) RETURNS bigint LANGUAGE sql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH gone AS (
    DELETE FROM arkvory_upload_sessions
     WHERE id IN (
       SELECT s.id FROM arkvory_upload_sessions s
        WHERE s.finished_at < clock_timestamp() - make_interval(days => greatest(p_keep_days, 1))
          AND s.state IN ('done', 'failed', 'aborted', 'expired')
          AND NOT EXISTS (SELECT 1 FROM arkvory_upload_parts p WHERE p.session_id = s.id)
        ORDER BY s.finished_at
        LIMIT greatest(p_limit, 1))
    RETURNING 1)
  SELECT count(*) FROM gone
$$;
