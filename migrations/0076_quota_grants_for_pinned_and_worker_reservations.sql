-- The grants of the quota tables change with this migration (migrations/grants.ts): a writer's
-- reservation pinned to a blob (0073) updates its sha256 column on conflict, which its column grant
-- left out, so every upload under a quota failed for a writer login of its own; and the completion
-- worker now reads the quotas and reserves a multipart completion its session does not wholly hold.
-- `migrate` re-applies grants.ts after the migrations it runs, which is what carries the new grants
-- to a database whose roles exist; this migration records who writes the table on the table.
COMMENT ON TABLE arkvory_quota_reservations IS
  'Bytes held against storage quotas by uploads in progress: written by the writer and by the completion worker.';
