-- When each principal was last disabled. Re-enabling restores its keys, but a console session or
-- pre-signed link made before this moment stays void (docs/auth.md). Set by a trigger, so every
-- path that disables (admin API, CLI, console, plain SQL) records it; never cleared on enable.
-- Principals disabled when this runs get now(): their older sessions and links stay dead too.
ALTER TABLE arkvory_principals ADD COLUMN disabled_at timestamptz;
UPDATE arkvory_principals SET disabled_at = now() WHERE disabled;

CREATE FUNCTION arkvory_principal_disabled_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.disabled AND (TG_OP = 'INSERT' OR NOT OLD.disabled) THEN
    NEW.disabled_at := now();
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER arkvory_principals_disabled_at BEFORE INSERT OR UPDATE OF disabled ON arkvory_principals
  FOR EACH ROW EXECUTE FUNCTION arkvory_principal_disabled_at();
