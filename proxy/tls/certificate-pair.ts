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
  /** Certificates in the chain file, the leaf included. */
  readonly chainLength: number;
}

export type PairCheck =
  | { readonly ok: true; readonly certificate: ServedCertificate }
  | { readonly ok: false; readonly reason: string };

const BEGIN = '-----BEGIN CERTIFICATE-----';
const END = '-----END CERTIFICATE-----';

/**
 * extendedKeyUsage values a TLS client takes a server certificate with: serverAuth, Netscape's and
 * Microsoft's server-gated crypto (OpenSSL still counts both as serverAuth) and anyExtendedKeyUsage
 * (taken by Go, browsers and Java). A certificate listing none of them is refused by every client.
 */
const SERVER_PURPOSES = new Set([
  '1.3.6.1.5.5.7.3.1',
  '2.16.840.1.113730.4.1',
  '1.3.6.1.4.1.311.10.3.3',
  '2.5.29.37.0',
]);

/** Every certificate in a PEM chain, in file order (leaf first by convention). */
export function splitPemChain(pem: string): string[] {
  // One pass: a lazy regex from each BEGIN to its END scanned the rest of the text again from every
  // BEGIN that has none, seconds of a blocked event loop for a garbage file of a few hundred KB.
  const blocks: string[] = [];
  let from = 0;
  for (;;) {
    const begin = pem.indexOf(BEGIN, from);
    if (begin < 0) return blocks;
    // At least one character between the markers, as PEM has its base64 there.
    const end = pem.indexOf(END, begin + BEGIN.length + 1);
    if (end < 0) return blocks;
    from = end + END.length;
    blocks.push(pem.slice(begin, from));
  }
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
  // A client certificate deployed in its place (same CA, same names) passes every other check here.
  // Node names the extendedKeyUsage list `keyUsage`; undefined when the certificate has none (any use).
  const purposes = leaf.keyUsage as readonly string[] | undefined;
  if (purposes !== undefined && !purposes.some((oid) => SERVER_PURPOSES.has(oid)))
    return {
      ok: false,
      reason: `the certificate is not for TLS servers: its extendedKeyUsage (${purposes.join(', ')}) lacks serverAuth (1.3.6.1.5.5.7.3.1), so clients refuse it`,
    };
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
      chainLength: chain.length,
    },
  };
}

/**
 * Why a private key file of `mode` (its stat) is exposed: readable by every account of the host,
 * so any local process or user can take the key and pose as this listener. Undefined when not.
 */
export function keyFileExposure(mode: number): string | undefined {
  if ((mode & 0o004) === 0) return undefined;
  return `readable by every account of this host (mode ${(mode & 0o777).toString(8).padStart(4, '0')})`;
}

/**
 * One part of what a listener serves, read again: the certificate and key together, or the client
 * CA bundle. `same` when its files hold the bytes served now (a `touch`, an event for another file).
 */
export type PartCheck<T> =
  | { readonly state: 'same' }
  | { readonly state: 'new'; readonly value: T }
  | { readonly state: 'broken'; readonly reason: string };

export type ReloadDecision =
  | { readonly action: 'unchanged' }
  | {
      readonly action: 'swap';
      /** The new leaf, when the pair changed; undefined when only the client CA did. */
      readonly certificate: ServedCertificate | undefined;
      readonly clientCa: boolean;
      /** The other part's problem, when one part is new and the other broken. */
      readonly failures: readonly string[];
    }
  | { readonly action: 'reject'; readonly failures: readonly string[] };

/**
 * What a reload does with the parts read again. Each part is judged on its own: a broken one keeps
 * what is served of it, and never holds back the other (a CA taken out of trust is dropped even
 * while a renewed pair is still half-written).
 */
export function decideReload(pair: PartCheck<ServedCertificate>, clientCa: PartCheck<unknown>): ReloadDecision {
  const failures = [pair, clientCa].flatMap((p) => (p.state === 'broken' ? [p.reason] : []));
  const certificate = pair.state === 'new' ? pair.value : undefined;
  const caChanged = clientCa.state === 'new';
  if (certificate || caChanged) return { action: 'swap', certificate, clientCa: caChanged, failures };
  return failures.length > 0 ? { action: 'reject', failures } : { action: 'unchanged' };
}
