-- Shared download budget: the stored policy every participant must match, and one lease row per slot.
-- Guarantees: a slot has one owner (process UUID) at a time; every takeover raises the generation, so
-- an old owner's late renewal (owner, generation) matches no row. Times are database time.
CREATE TABLE arkvory_download_policy (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  slots integer NOT NULL CHECK (slots BETWEEN 2 AND 16),
  download_bytes_per_second bigint NOT NULL CHECK (download_bytes_per_second > 0),
  download_bytes_per_second_per_principal bigint NOT NULL CHECK (download_bytes_per_second_per_principal >= 0),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE arkvory_gateway_leases (
  slot integer PRIMARY KEY CHECK (slot BETWEEN 0 AND 15),
  owner uuid NOT NULL,
  generation bigint NOT NULL,
  role text NOT NULL CHECK (role IN ('api', 'reader')),
  advertise_url text,
  acquired_at timestamptz NOT NULL,
  renewed_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
