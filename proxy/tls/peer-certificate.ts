/**
 * A connection's client certificate as the auth gate needs it, read once per connection (the TLS
 * layer verified it in the handshake; renegotiation is off, so it cannot change) and kept on the
 * socket. Whether it still authenticates (bound, principal enabled, not expired) is decided per
 * request by the gate; whether its CA is still trusted, here, when the client CA file changed.
 */
import { X509Certificate } from 'node:crypto';
import type { Socket } from 'node:net';
import type { DetailedPeerCertificate, PeerCertificate as TlsCertificate, TLSSocket } from 'node:tls';
import { certificateSans, type PeerCertificate } from '../../policy/auth/client-certificate.ts';
import { judgeClientLeaf } from './client-leaf.ts';
import type { ClientTrust } from './served-tls.ts';

const PEER = Symbol('arkvory.peerCertificate');
const TRUST = Symbol('arkvory.clientTrust');
/** On an accepted TCP socket: the trust generation current when it was accepted (its handshake's). */
const ACCEPTED = Symbol('arkvory.trustAtAccept');
/** The first trust generation whose removal of a CA this connection must be checked against. */
const CHECK_FROM = Symbol('arkvory.trustCheckFrom');
/** SHA-256 fingerprints of the CAs of ARKVORY_TLS_CLIENT_CA_FILE the verdict rests on: the leaf's issuer and those above it. */
const CHAIN = Symbol('arkvory.chain');

/**
 * The CAs trusted now (served-tls.ts): `generation` moves when ARKVORY_TLS_CLIENT_CA_FILE changes,
 * `lastRemovalGeneration` when a change took a CA out.
 */
export interface ClientTrustSource {
  readonly clientTrust: ClientTrust;
}

type CachingSocket = Socket & {
  [PEER]?: PeerCertificate;
  [TRUST]?: ClientTrustSource;
  [ACCEPTED]?: number;
  [CHECK_FROM]?: number;
  [CHAIN]?: readonly string[];
};

/**
 * Called on each accepted TCP connection, before its handshake starts: the server's secure context
 * is swapped in the same step as the trust generation moves (served-tls.ts), so the handshake is
 * verified against the CAs of the generation current now.
 */
export function noteClientTrustAtAccept(raw: Socket, source: ClientTrustSource): void {
  (raw as CachingSocket)[ACCEPTED] = source.clientTrust.generation;
}

/** Called once per TLS connection: its certificate is judged against `source`'s CAs as they change. */
export function trackClientTrust(socket: Socket, source: ClientTrustSource): void {
  const s = socket as CachingSocket;
  s[TRUST] = source;
  // Node keeps the accepted TCP socket as `_parent`. Without its note, the handshake may have been
  // verified against the CAs of the generation before the current one (a reload during it).
  const accepted = (socket as Socket & { _parent?: CachingSocket })._parent?.[ACCEPTED];
  s[CHECK_FROM] = accepted === undefined ? source.clientTrust.generation : accepted + 1;
}

const NONE: PeerCertificate = { kind: 'none' };

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
  else peer = judged(s, cert, verifiedChain(s as TLSSocket));
  s[PEER] = peer;
  return peer.kind === 'verified' ? stillAnchored(s, peer) : peer;
}

/**
 * A certificate the handshake verified, as a principal's (client-leaf.ts): no CA certificate, and
 * signed by a certificate of ARKVORY_TLS_CLIENT_CA_FILE itself. `chain` is Node's: the leaf, then the
 * CAs of the file above it (an intermediate the client sent is never shown on a server's side).
 */
function judged(s: CachingSocket, cert: TlsCertificate, chain: DetailedPeerCertificate[]): PeerCertificate {
  const trust = s[TRUST]?.clientTrust;
  const judgement = judgeClientLeaf(new X509Certificate(cert.raw), trust?.certificates ?? []);
  if (!judgement.ok) return { kind: 'unverified', reason: judgement.reason };
  // The CAs of the file this verdict rests on, each of which must stay in it (stillAnchored).
  s[CHAIN] = [...new Set([judgement.issuer.fingerprint256, ...chain.slice(1).map((c) => c.fingerprint256)])];
  return {
    kind: 'verified',
    sans: certificateSans(cert.subjectaltname),
    // The chain's first expiry, not the leaf's alone: the handshake checked each certificate of it,
    // and a CA that expires while the connection stays open (HTTP/2 keeps one for days) must end
    // its authentication as the leaf's own expiry does.
    notAfterMs: Math.min(
      Date.parse(cert.valid_to),
      Date.parse(judgement.issuer.validTo),
      ...chain.map((c) => Date.parse(c.valid_to)),
    ),
    serial: cert.serialNumber,
  };
}

/**
 * A certificate verified in the handshake stays verified while no CA was taken out of
 * ARKVORY_TLS_CLIENT_CA_FILE since; CAs added (or the file rewritten) change nothing. Once one was
 * taken out, every CA of the file its verdict rested on must still be in it (its issuer and the CAs
 * above it: an intermediate of the file whose root was taken out verifies no new handshake either),
 * so a CA taken out of trust reaches connections already open (checked once per change, not per request).
 */
function stillAnchored(s: CachingSocket, peer: PeerCertificate): PeerCertificate {
  const trust = s[TRUST]?.clientTrust;
  const from = s[CHECK_FROM];
  if (!trust || from === undefined || trust.lastRemovalGeneration < from) return peer;
  const rested = s[CHAIN] ?? [];
  if (rested.length > 0 && rested.every((fingerprint) => trust.anchors.has(fingerprint))) {
    s[CHECK_FROM] = trust.generation + 1;
    return peer;
  }
  const refused: PeerCertificate = {
    kind: 'unverified',
    reason: 'the client certificate was verified against a CA no longer in ARKVORY_TLS_CLIENT_CA_FILE',
  };
  s[PEER] = refused;
  return refused;
}

/** The peer's verified chain as Node shows it, leaf first (each certificate once: a root is its own issuer). */
function verifiedChain(socket: TLSSocket): DetailedPeerCertificate[] {
  const out: DetailedPeerCertificate[] = [];
  const seen = new Set<string>();
  let cert: DetailedPeerCertificate | undefined = socket.getPeerCertificate(true);
  while (cert && Object.keys(cert).length > 0 && !seen.has(cert.fingerprint256)) {
    seen.add(cert.fingerprint256);
    out.push(cert);
    cert = cert.issuerCertificate;
  }
  return out;
}

/** Loopback peers (the same host: a local nginx, a sidecar's app) may send credentials in clear. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}
