-- A reservation may be pinned to the blob its upload declared (docs/storage-quotas.md, "Bytes
-- already held"): it then counts nothing while the catalog counts that blob for the subject (in the
-- reservation's repository), and reservations pinned to the same blob count once, the largest. So a
-- re-upload of bytes a repository holds reserves nothing, and a delete of the last row holding them
-- while it runs does not free room it will take back: the reservation counts them again at once.
-- NULL: an ordinary reservation, counting its bytes. Assumes 0050.
ALTER TABLE arkvory_quota_reservations
  ADD COLUMN sha256 text CHECK (sha256 ~ '^[0-9a-f]{64}$');
