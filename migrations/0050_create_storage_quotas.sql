-- Storage quotas (docs/storage-quotas.md): a byte limit per repository and, optionally, per
-- principal, and the reservations uploads in progress hold against them. Guarantees: usage is the
-- catalog's bytes (each blob once per repository that references it; for a principal, once per
-- repository it published it to) plus the live reservations; an upload reserves under an advisory
-- lock per subject before its body is read, and the catalog insert that publishes it deletes its
-- reservation in the same statement, so usage never exceeds a limit. A reservation whose gateway
-- stopped renewing it counts until expires_at. Assumes 0003 (arkvory_artifacts).
CREATE TABLE arkvory_storage_quotas (
  scope text NOT NULL CHECK (scope IN ('repository', 'principal')),
  -- A repository name, or a principal id (no foreign key: a quota may be set before the repository
  -- exists, and outlives nothing it names but itself).
  subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 128),
  limit_bytes bigint NOT NULL CHECK (limit_bytes >= 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, subject)
);

CREATE TABLE arkvory_quota_reservations (
  id uuid PRIMARY KEY,
  repository text NOT NULL,
  principal_id uuid,
  bytes bigint NOT NULL CHECK (bytes >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX arkvory_quota_reservations_repository ON arkvory_quota_reservations (repository);
CREATE INDEX arkvory_quota_reservations_principal ON arkvory_quota_reservations (principal_id)
  WHERE principal_id IS NOT NULL;

-- A principal's usage walks the rows it published.
CREATE INDEX arkvory_artifacts_published_by ON arkvory_artifacts (published_by) WHERE published_by IS NOT NULL;
