/**
 * Which verified client certificates may name a principal, beyond the handshake's verification.
 * OpenSSL takes any chain that reaches a CA of ARKVORY_TLS_CLIENT_CA_FILE, using the intermediates
 * the client sends, and takes a CA certificate as a client's own. So a principal whose certificate
 * was signed with CA:TRUE could issue a leaf naming another principal's SAN and send it followed by
 * its own certificate: verified, and bound to that other principal. Hence two rules (docs/tls.md):
 * the client's certificate is no CA certificate, and it was signed by a certificate of the file
 * itself, never by an intermediate only the client brought. Pure: the caller parses.
 */
import type { X509Certificate } from 'node:crypto';

export type LeafJudgement =
  | { readonly ok: true; readonly issuer: X509Certificate }
  | { readonly ok: false; readonly reason: string };

export const CA_LEAF_REASON =
  "the client certificate is a CA certificate (basicConstraints CA:TRUE): a principal's certificate must be an end-entity one";
export const NOT_ISSUED_BY_THE_FILE_REASON =
  'the client certificate was not issued by a CA of ARKVORY_TLS_CLIENT_CA_FILE: an intermediate CA the client sends does not name principals (put it in the file to trust it)';

/** `leaf` (verified in the handshake) against the certificates of ARKVORY_TLS_CLIENT_CA_FILE now. */
export function judgeClientLeaf(leaf: X509Certificate, fileCertificates: readonly X509Certificate[]): LeafJudgement {
  if (leaf.ca) return { ok: false, reason: CA_LEAF_REASON };
  // Names and key identifiers first (cheap), then the signature itself: a look-alike of a CA of the
  // file (same subject, another key) that the client sent as an intermediate does not pass.
  const issuer = fileCertificates.find((ca) => leaf.checkIssued(ca) && leaf.verify(ca.publicKey));
  return issuer ? { ok: true, issuer } : { ok: false, reason: NOT_ISSUED_BY_THE_FILE_REASON };
}
