/**
 * A connection's client certificate as the auth gate needs it, read once per connection (the TLS
 * layer verified it in the handshake; renegotiation is off, so it cannot change) and kept on the
 * socket. Whether it still authenticates (bound, principal enabled, not expired) is decided per
 * request by the gate; whether its CA is still trusted, here, when the client CA file changed.
 */
import type { Socket } from 'node:net';
import type { DetailedPeerCertificate, TLSSocket } from 'node:tls';
import { certificateSans, type PeerCertificate } from '../../policy/auth/client-certificate.ts';
import type { ClientTrust } from './served-tls.ts';

const PEER = Symbol('arkvory.peerCertificate');
const TRUST = Symbol('arkvory.clientTrust');
/** The trust generation a verified certificate was last found anchored in, and its chain's fingerprints. */
const ANCHORED = Symbol('arkvory.anchored');

/** The CAs trusted now (served-tls.ts): `generation` moves when ARKVORY_TLS_CLIENT_CA_FILE changes. */
export interface ClientTrustSource {
  readonly clientTrust: ClientTrust;
}

type CachingSocket = Socket & {
  [PEER]?: PeerCertificate;
  [TRUST]?: ClientTrustSource;
  [ANCHORED]?: { generation: number; chain: readonly string[] };
};

const NONE: PeerCertificate = { kind: 'none' };

/** Called once per TLS connection: its certificate is judged against `source`'s CAs as they change. */
export function trackClientTrust(socket: Socket, source: ClientTrustSource): void {
  (socket as CachingSocket)[TRUST] = source;
}

export function peerCertificateOf(socket: Socket | null | undefined): PeerCertificate {
  const s = socket as (CachingSocket & Partial<TLSSocket>) | null | undefined;
  if (!s?.encrypted || typeof s.getPeerCertificate !== 'function') return NONE;
  const cached = s[PEER];
  if (cached) return cached.kind === 'verified' ? stillAnchored(s, cached) : cached;
  const cert = s.getPeerCertificate();
  let peer: PeerCertificate;
  if (!cert || Object.keys(cert).length === 0) peer = NONE;
  else if (!s.authorized)
    peer = {
      kind: 'unverified',
      reason: `the client certificate was not verified: ${String(s.authorizationError ?? 'unknown reason')}`,
    };
  else {
    peer = {
      kind: 'verified',
      sans: certificateSans(cert.subjectaltname),
      notAfterMs: Date.parse(cert.valid_to),
      serial: cert.serialNumber,
    };
    // The handshake may have been verified against CAs changed since: anchored in today's, once.
    if (s[TRUST]) s[ANCHORED] = { generation: Number.NaN, chain: chainFingerprints(s as TLSSocket) };
  }
  s[PEER] = peer;
  return peer.kind === 'verified' ? stillAnchored(s, peer) : peer;
}

/**
 * A certificate verified in the handshake stays verified while the CAs it was checked against do;
 * once ARKVORY_TLS_CLIENT_CA_FILE changed, its chain must still hold a certificate of the new file,
 * so a CA taken out of trust reaches connections already open (checked once per change, not per request).
 */
function stillAnchored(s: CachingSocket, peer: PeerCertificate): PeerCertificate {
  const trust = s[TRUST]?.clientTrust;
  const anchored = s[ANCHORED];
  if (!trust || !anchored || anchored.generation === trust.generation) return peer;
  if (anchored.chain.some((fingerprint) => trust.anchors.has(fingerprint))) {
    anchored.generation = trust.generation;
    return peer;
  }
  const refused: PeerCertificate = {
    kind: 'unverified',
    reason: 'the client certificate was verified against a CA no longer in ARKVORY_TLS_CLIENT_CA_FILE',
  };
  s[PEER] = refused;
  return refused;
}

/** SHA-256 fingerprints of the peer's verified chain, leaf to root. */
function chainFingerprints(socket: TLSSocket): string[] {
  const out: string[] = [];
  let cert: DetailedPeerCertificate | undefined = socket.getPeerCertificate(true);
  while (cert && Object.keys(cert).length > 0 && !out.includes(cert.fingerprint256)) {
    out.push(cert.fingerprint256);
    cert = cert.issuerCertificate;
  }
  return out;
}

/** Loopback peers (the same host: a local nginx, a sidecar's app) may send credentials in clear. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}
