-- An audit row's `id` and `at` (0040) are the database's: the runtime roles held table-wide INSERT
-- on arkvory_audit_events, so a compromised process could backdate a row (`at`) or place one among
-- old ids (OVERRIDING SYSTEM VALUE) and forge the trail. They now may insert only the columns a
-- recording process writes (migrations/grants.ts, proxy/audit/audit-log.ts). `migrate` re-applies
-- grants.ts after this migration once `db roles` has made the roles; this does the same for the
-- audit trail alone, so it holds whoever runs it. Without the roles (no `db roles` yet) there is
-- nothing to change.
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['arkvory_writer', 'arkvory_maintenance', 'arkvory_rules'] LOOP
    IF to_regrole(r) IS NOT NULL THEN
      EXECUTE format('REVOKE INSERT ON TABLE arkvory_audit_events FROM %I', r);
      EXECUTE format(
        'GRANT INSERT (action, actor_kind, principal_id, principal_name, operator, host, source, request_id, '
        'client_request_id, target, details) ON TABLE arkvory_audit_events TO %I', r);
    END IF;
  END LOOP;
END
$$;
