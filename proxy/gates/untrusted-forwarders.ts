/**
 * Untrusted peers that send `X-Forwarded-For`/`Forwarded`: usually a router or proxy missing from
 * ARKVORY_TRUSTED_PROXIES. Each is logged once (warn) and recorded in `arkvory_forwarding_peers`,
 * where `arkvory doctor` finds it; at most `maxPeers` are remembered, and a peer's row is refreshed
 * at most once per `refreshMs`, so a header-forging client costs neither log lines nor writes.
 */
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';

export type RecordForwarder = (peer: string) => Promise<void>;

export function createUntrustedForwarderReport(deps: {
  log: Logger;
  clock: Clock;
  record?: RecordForwarder;
  maxPeers?: number;
  refreshMs?: number;
}): (peer: string) => void {
  const maxPeers = deps.maxPeers ?? 64;
  const refreshMs = deps.refreshMs ?? 3_600_000;
  const recordedAtMs = new Map<string, number>();
  return (peer) => {
    const now = deps.clock.monotonicMs();
    const last = recordedAtMs.get(peer);
    if (last !== undefined && now - last < refreshMs) return;
    if (last === undefined) {
      if (recordedAtMs.size >= maxPeers) return;
      deps.log.warn(
        { peer, code: 'untrusted_forwarder' },
        'a peer that is not in ARKVORY_TRUSTED_PROXIES sends X-Forwarded-For/Forwarded: its client addresses are not believed (bans from it are keyed per peer and claimed client, and charge the peer an eighth of each failure); if it is your router or proxy, add it to ARKVORY_TRUSTED_PROXIES (docs/router.md)',
      );
    }
    recordedAtMs.set(peer, now);
    deps.record?.(peer).catch((err: unknown) => {
      deps.log.debug({ err: { message: (err as Error).message }, peer }, 'recording an untrusted forwarder failed');
    });
  };
}
