-- Server secrets that sign pre-signed links (HMAC-SHA256). The newest row without `retires_at` signs
-- new links; a link verifies only against the secret that signed it, while that secret has not
-- retired. Rotation inserts a new secret and sets `retires_at` on the old one (now, or after a
-- grace period), so old links die. Every change bumps the auth epoch: gateways drop cached secrets
-- within the same 2 s bound as a revoked key.
CREATE TABLE arkvory_presign_secrets (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  secret bytea NOT NULL CHECK (length(secret) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  retires_at timestamptz
);

CREATE TRIGGER arkvory_presign_secrets_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_presign_secrets
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
