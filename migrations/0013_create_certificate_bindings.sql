-- Client-certificate bindings (mutual TLS): a client certificate verified against
-- ARKVORY_TLS_CLIENT_CA_FILE whose subject alternative name equals `san` exactly (`URI:…`, e.g. a
-- SPIFFE id, or `DNS:…`, lower case) authenticates the principal with `scopes`, like a key would.
-- Every change bumps arkvory_auth_epoch (the trigger of 0002), so an unbinding reaches every
-- gateway's cache within the 2 s bound of a key revocation.
CREATE TABLE arkvory_certificate_bindings (
  san text PRIMARY KEY CHECK (length(san) <= 1028 AND san ~ '^(URI:[^[:space:][:cntrl:]]+|DNS:[a-z0-9*._-]+)$'),
  principal_id uuid NOT NULL REFERENCES arkvory_principals (id) ON DELETE CASCADE,
  scopes text[] NOT NULL CHECK (scopes <@ ARRAY['read', 'write', 'admin']::text[] AND cardinality(scopes) > 0),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX arkvory_certificate_bindings_principal ON arkvory_certificate_bindings (principal_id);

CREATE TRIGGER arkvory_certificate_bindings_changed AFTER INSERT OR DELETE OR UPDATE ON arkvory_certificate_bindings
  FOR EACH STATEMENT EXECUTE FUNCTION arkvory_auth_changed();
