/**
 * A connection's client certificate as the auth gate needs it, read once per connection (the TLS
 * layer verified it in the handshake; renegotiation is off, so it cannot change) and kept on the
 * socket. Whether it still authenticates (bound, principal enabled, not expired) is decided per
 * request by the gate.
 */
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { certificateSans, type PeerCertificate } from '../../policy/auth/client-certificate.ts';

const PEER = Symbol('arkvory.peerCertificate');
type CachingSocket = Socket & { [PEER]?: PeerCertificate };

const NONE: PeerCertificate = { kind: 'none' };

export function peerCertificateOf(socket: Socket | null | undefined): PeerCertificate {
  const s = socket as (CachingSocket & Partial<TLSSocket>) | null | undefined;
  if (!s?.encrypted || typeof s.getPeerCertificate !== 'function') return NONE;
  const cached = s[PEER];
  if (cached) return cached;
  const cert = s.getPeerCertificate();
  let peer: PeerCertificate;
  if (!cert || Object.keys(cert).length === 0) peer = NONE;
  else if (!s.authorized)
    peer = {
      kind: 'unverified',
      reason: `the client certificate was not verified: ${String(s.authorizationError ?? 'unknown reason')}`,
    };
  else
    peer = {
      kind: 'verified',
      sans: certificateSans(cert.subjectaltname),
      notAfterMs: Date.parse(cert.valid_to),
      serial: cert.serialNumber,
    };
  s[PEER] = peer;
  return peer;
}

/** Loopback peers (the same host: a local nginx, a sidecar's app) may send credentials in clear. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}
