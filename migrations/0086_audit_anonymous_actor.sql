-- A refused console sign-in is recorded in the audit trail (console.sign_in_failed): its sender may
-- be nobody the gateway knows (an unknown or wrong key), so an entry may now have an `anonymous`
-- actor, with neither a principal nor an operator. The two pairing checks of 0040 hold as they are:
-- an anonymous row has no principal_id and no operator.
DO $$
DECLARE
  c text;
BEGIN
  -- The column check of 0040, by whatever name PostgreSQL gave it.
  FOR c IN
    SELECT conname FROM pg_constraint
     WHERE conrelid = 'arkvory_audit_events'::regclass AND contype = 'c'
       AND pg_get_constraintdef(oid) LIKE '%actor_kind = ANY%'
  LOOP
    EXECUTE format('ALTER TABLE arkvory_audit_events DROP CONSTRAINT %I', c);
  END LOOP;
END
$$;
ALTER TABLE arkvory_audit_events ADD CONSTRAINT arkvory_audit_events_actor_kind_check
  CHECK (actor_kind IN ('principal', 'operator', 'anonymous'));
