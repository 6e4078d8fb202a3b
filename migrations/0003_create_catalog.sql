-- The artifact catalog. Guarantees: a row exists only for a blob already durable under
-- blobs/sha256/…, and one name maps to one sha256 forever (immutable; DELETE frees the name).
-- Assumes 0002 created arkvory_repositories(name).
CREATE TABLE arkvory_artifacts (
  repository text NOT NULL REFERENCES arkvory_repositories (name) ON DELETE CASCADE,
  -- 'artifact': name = artifact id; 'package': name + version; 'asset': name + version + asset.
  kind text NOT NULL CHECK (kind IN ('artifact', 'package', 'asset')),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
  version text NOT NULL DEFAULT '' CHECK (length(version) <= 255),
  asset text NOT NULL DEFAULT '' CHECK (length(asset) <= 255),
  sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
  content_type text NOT NULL,
  published_by uuid, -- principal id; no FK: artifacts outlive the account that published them
  created_at timestamptz NOT NULL DEFAULT date_trunc('second', now()),
  PRIMARY KEY (repository, kind, name, version, asset),
  CHECK ((kind = 'artifact' AND version = '' AND asset = '')
      OR (kind = 'package' AND version <> '' AND asset = '')
      OR (kind = 'asset' AND version <> '' AND asset <> ''))
);

-- gc finds referenced blobs through this index.
CREATE INDEX arkvory_artifacts_sha256 ON arkvory_artifacts (sha256);
