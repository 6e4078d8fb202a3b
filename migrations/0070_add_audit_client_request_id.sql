-- The X-Request-Id a client sent, kept beside the request id (docs/observability.md "Audit trail").
-- request_id is now always the gateway's own id for the request (or the CLI run's): a client
-- choosing it could point an audited action at another request's log lines. Assumes 0040.
ALTER TABLE arkvory_audit_events
  ADD COLUMN client_request_id text CHECK (length(client_request_id) <= 64);
