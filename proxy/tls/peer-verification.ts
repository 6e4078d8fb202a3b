/**
 * What an operator should read when a TLS peer we connect to (PostgreSQL, Redis, a store, a
 * gateway) is refused in the handshake: which check failed and where the fix goes. Node reports
 * these as OpenSSL's verification codes, which name the symptom but not the variable to change.
 */

/** OpenSSL verification codes meaning "no CA we trust signed this certificate". */
const UNTRUSTED = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
]);
const EXPIRED = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);

/**
 * The reason `err` (from a TLS client) refused the peer's certificate, with what to do; undefined
 * when `err` is not a certificate verification failure. `caHint` names where extra CAs go for this
 * peer (e.g. "ARKVORY_TLS_CA_FILE or sslrootcert= in ARKVORY_DATABASE_URL").
 */
export function describeCertificateRefusal(err: unknown, caHint: string): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code !== 'string') return undefined;
  const detail = `${code}: ${(err as Error).message}`;
  if (UNTRUSTED.has(code))
    return `its TLS certificate is not signed by a CA this process trusts (${detail}); put the CA that signed it in ${caHint}`;
  if (EXPIRED.has(code))
    return `its TLS certificate is outside its validity period (${detail}); renew it on that server`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return `its TLS certificate does not name the host connected to (${detail}); connect by a name or address in its subjectAltName`;
  return undefined;
}
