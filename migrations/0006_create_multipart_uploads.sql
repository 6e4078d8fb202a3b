-- Multipart upload sessions, their parts and completion jobs.
-- Guarantees: a job names its parts in order with their digests; the worker publishes through the
-- same atomic path as a full upload, so a crash leaves the job to retry and never a half artifact.
CREATE TABLE arkvory_upload_sessions (
  id uuid PRIMARY KEY,
  repository text NOT NULL REFERENCES arkvory_repositories (name) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('artifact', 'package', 'asset')),
  name text NOT NULL,
  version text NOT NULL DEFAULT '',
  asset text NOT NULL DEFAULT '',
  content_type text NOT NULL,
  expected_size bigint CHECK (expected_size >= 0),
  expected_sha256 text CHECK (expected_sha256 ~ '^[0-9a-f]{64}$'),
  principal_id uuid,
  state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'completing', 'done', 'failed', 'aborted', 'expired')),
  error text,
  result_sha256 text,
  result_size bigint,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  finished_at timestamptz
);
CREATE INDEX arkvory_upload_sessions_expiry ON arkvory_upload_sessions (expires_at) WHERE state = 'open';

CREATE TABLE arkvory_upload_parts (
  session_id uuid NOT NULL REFERENCES arkvory_upload_sessions (id) ON DELETE CASCADE,
  part_number integer NOT NULL CHECK (part_number BETWEEN 1 AND 10000),
  size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
  sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  file_name text NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, part_number)
);

CREATE TABLE arkvory_upload_jobs (
  id bigserial PRIMARY KEY,
  session_id uuid NOT NULL UNIQUE REFERENCES arkvory_upload_sessions (id) ON DELETE CASCADE,
  parts jsonb NOT NULL,
  state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
  attempts integer NOT NULL DEFAULT 0,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX arkvory_upload_jobs_queued ON arkvory_upload_jobs (id) WHERE state = 'queued';
