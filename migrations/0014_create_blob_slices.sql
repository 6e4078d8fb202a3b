-- Per-slice sha256 digests of a blob, recorded at publish (upload, multipart completion, restore)
-- beside the blob's own sha256 and backfilled by scrub for blobs published before. The slice cache
-- in front of a remote store (storage-adapter/slice-cache/) serves a slice only after checking it
-- against its digest here, and only while this row exists: gc and scrub delete the row of a blob
-- they remove or quarantine, which bumps the catalog epoch (0009), so every gateway stops serving
-- that blob's slices within the catalog cache's bound and removes them.
CREATE TABLE arkvory_blob_slices (
  sha256 text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
  slice_bytes integer NOT NULL CHECK (slice_bytes > 0),
  -- ceil(size / slice) digests of 32 bytes each, in order.
  digests bytea NOT NULL CHECK (octet_length(digests) = 32 * ((size_bytes + slice_bytes - 1) / slice_bytes)),
  recorded_at timestamptz NOT NULL DEFAULT now()
);

-- INSERT needs no bump (a cache trusts only rows it read); a removed row must reach every gateway.
CREATE TRIGGER arkvory_blob_slices_removed AFTER DELETE OR UPDATE ON arkvory_blob_slices
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_catalog_changed();
CREATE TRIGGER arkvory_blob_slices_truncated AFTER TRUNCATE ON arkvory_blob_slices
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_catalog_changed();

-- Purge requests (admin API, `arkvory cache purge`): every gateway removes the named blobs'
-- slices when it sees a request newer than the last one it applied. Kept short: old rows are
-- deleted by the next purge after a day.
CREATE TABLE arkvory_cache_purges (
  id bigserial PRIMARY KEY,
  sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER arkvory_cache_purged AFTER INSERT ON arkvory_cache_purges
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_catalog_changed();
