-- A principal inserted already disabled with its disabled_at given keeps that time: a restore
-- (storage-adapter/backup/restore.ts) inserts every principal as the backup holds it, and the trigger
-- of 0010 rewrote a disabled one's disabled_at to the time of the restore. That moment voids the
-- principal's console sessions and pre-signed links made before it (docs/auth.md); it must stay the
-- one when the principal was disabled. An insert without it (none of the runtime paths gives one),
-- and every update that disables, still get now().
CREATE OR REPLACE FUNCTION arkvory_principal_disabled_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.disabled AND ((TG_OP = 'INSERT' AND NEW.disabled_at IS NULL) OR (TG_OP = 'UPDATE' AND NOT OLD.disabled)) THEN
    NEW.disabled_at := now();
  END IF;
  RETURN NEW;
END $$;
