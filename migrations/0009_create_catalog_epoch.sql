-- Gateways cache catalog rows (rows are immutable; only DELETE, or a repository's cascade, ends
-- one). Every statement that removes rows bumps arkvory_catalog_epoch and NOTIFYs arkvory_catalog,
-- so each gateway drops its cached rows: at once on the notification, at the latest on its next
-- epoch poll. Same scheme as arkvory_auth_epoch (0002), separate so a delete does not empty the
-- key cache and a revocation does not empty the catalog cache.
CREATE TABLE arkvory_catalog_epoch (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  epoch bigint NOT NULL
);
INSERT INTO arkvory_catalog_epoch (singleton, epoch) VALUES (true, 0);

CREATE FUNCTION arkvory_catalog_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE arkvory_catalog_epoch SET epoch = epoch + 1;
  PERFORM pg_notify('arkvory_catalog', '');
  RETURN NULL;
END $$;

-- INSERT needs no bump: a cache holds only rows that exist, and a name is free only after a DELETE.
CREATE TRIGGER arkvory_artifacts_removed AFTER DELETE OR UPDATE ON arkvory_artifacts
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_catalog_changed();
CREATE TRIGGER arkvory_artifacts_truncated AFTER TRUNCATE ON arkvory_artifacts
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_catalog_changed();
