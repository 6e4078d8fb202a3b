/**
 * Pure checks of a certificate chain and key as read from their PEM files: does the key match the
 * leaf, is the leaf valid now, and what is served (serial, expiry, names). Time is an argument;
 * node:crypto parses, nothing is read from disk here (served-tls.ts does that).
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';

export interface ServedCertificate {
  /** Hex serial of the leaf, as `openssl x509 -serial` prints it (upper case). */
  readonly serial: string;
  readonly subject: string;
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
  /** SHA-256 fingerprint of the leaf: the same pair read twice is the same pair. */
  readonly fingerprint256: string;
  /** Certificates in the chain file, the leaf included. */
  readonly chainLength: number;
}

export type PairCheck =
  | { readonly ok: true; readonly certificate: ServedCertificate }
  | { readonly ok: false; readonly reason: string };

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Every certificate in a PEM chain, in file order (leaf first by convention). */
export function splitPemChain(pem: string): string[] {
  return pem.match(PEM_CERTIFICATE) ?? [];
}

/** Parses the chain, matches the key to the leaf and checks the leaf's validity at `nowMs`. */
export function checkCertificatePair(certPem: string | Buffer, keyPem: string | Buffer, nowMs: number): PairCheck {
  const chain = splitPemChain(certPem.toString());
  if (chain.length === 0) return { ok: false, reason: 'the certificate file holds no PEM certificate' };
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(chain[0]!);
  } catch (err) {
    return { ok: false, reason: `the first certificate of the chain cannot be parsed (${(err as Error).message})` };
  }
  let matches: boolean;
  try {
    matches = leaf.checkPrivateKey(createPrivateKey(keyPem));
  } catch (err) {
    return { ok: false, reason: `the key file holds no usable PEM private key (${(err as Error).message})` };
  }
  if (!matches) return { ok: false, reason: 'the private key does not match the certificate' };
  const notBeforeMs = Date.parse(leaf.validFrom);
  const notAfterMs = Date.parse(leaf.validTo);
  if (notAfterMs <= nowMs)
    return { ok: false, reason: `the certificate expired at ${new Date(notAfterMs).toISOString()}` };
  if (notBeforeMs > nowMs)
    return { ok: false, reason: `the certificate is not valid before ${new Date(notBeforeMs).toISOString()}` };
  return {
    ok: true,
    certificate: {
      serial: leaf.serialNumber.toUpperCase(),
      subject: leaf.subject.replace(/\n/g, ', '),
      notBeforeMs,
      notAfterMs,
      fingerprint256: leaf.fingerprint256,
      chainLength: chain.length,
    },
  };
}

export type ReloadDecision =
  | { readonly action: 'unchanged' }
  | { readonly action: 'swap'; readonly certificate: ServedCertificate }
  | { readonly action: 'reject'; readonly reason: string };

/**
 * What a reload does with a freshly read pair: a broken one is rejected (the served pair stays), the
 * served one read again changes nothing (a `touch`, a watch event for another file), anything else
 * valid replaces it. `clientCaChanged` forces a swap of an unchanged leaf (the trusted CAs moved).
 */
export function decideReload(
  served: ServedCertificate | undefined,
  candidate: PairCheck,
  clientCaChanged = false,
): ReloadDecision {
  if (!candidate.ok) return { action: 'reject', reason: candidate.reason };
  if (!clientCaChanged && served && served.fingerprint256 === candidate.certificate.fingerprint256)
    return { action: 'unchanged' };
  return { action: 'swap', certificate: candidate.certificate };
}
