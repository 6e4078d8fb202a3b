-- Core tables every role needs. Guarantees: the storage root is bound to exactly one database row.
-- Assumes PostgreSQL >= 13 (gen_random_uuid is built in).
CREATE TABLE arkvory_storage (
  id uuid PRIMARY KEY,
  singleton boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton),
  created_at timestamptz NOT NULL DEFAULT now()
);
