-- Slice digests recorded for a blob that was already published (scrub's backfill, a restore, or
-- the same bytes uploaded again under another name) must reach every gateway: each remembers, per
-- catalog epoch, that a blob had none and relays it uncached. Such an insert bumps the epoch (as a
-- DELETE does, 0009), so every gateway's slice cache uses the new digests within the catalog
-- cache's bound. An insert for a blob being published for the first time (no catalog row yet: the
-- digests are recorded before it) does not bump, so uploads do not empty the catalog caches.
-- SECURITY DEFINER like the other epoch triggers (0020): the runtime roles that record digests may not
-- update the epoch table themselves.
CREATE FUNCTION arkvory_blob_slices_backfilled() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM recorded r JOIN arkvory_artifacts a ON a.sha256 = r.sha256) THEN
    UPDATE arkvory_catalog_epoch SET epoch = epoch + 1;
    PERFORM pg_notify('arkvory_catalog', '');
  END IF;
  RETURN NULL;
END $$;

REVOKE EXECUTE ON FUNCTION arkvory_blob_slices_backfilled() FROM PUBLIC;

CREATE TRIGGER arkvory_blob_slices_backfilled AFTER INSERT ON arkvory_blob_slices
  REFERENCING NEW TABLE AS recorded
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_blob_slices_backfilled();
