-- A principal's sessions whose parts are stored and not yet assembled: the per-principal bounds on
-- open sessions and pending part bytes (storage-adapter/multipart/bounds.ts) read them on every
-- session opened and every part stored. Assumes 0006 (arkvory_upload_sessions).
CREATE INDEX arkvory_upload_sessions_pending_by_principal
  ON arkvory_upload_sessions (principal_id) WHERE state IN ('open', 'completing');
