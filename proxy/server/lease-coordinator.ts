/**
 * The Coordinator of a gateway process (policy/lease/coordinator.ts): the barriers, the stored
 * policy and (shared profile) the slot lease, on a connection of their own.
 */
import type { Logger } from 'pino';
import type { ConnectionUrl } from '../../lib/connection-url.ts';
import { systemClock } from '../../policy/clock.ts';
import { Coordinator } from '../../policy/lease/coordinator.ts';
import type { Config } from '../config/config.ts';

/**
 * `instance`: this process holds the instance's barrier, policy check and lease (a gateway of one
 * process, or the coordinating process of several workers). `worker`: one worker of several, which
 * takes only the maintenance barrier; the rest is its instance's (proxy/workers/).
 */
export function openCoordinator(
  config: Config,
  databaseUrl: ConnectionUrl,
  log: Logger,
  part: 'instance' | 'worker',
): Promise<Coordinator> {
  const role = part === 'worker' || config.role === 'worker' ? 'worker' : config.role === 'reader' ? 'reader' : 'api';
  return Coordinator.open({
    databaseUrl,
    role,
    // A worker of a writer instance holds the writer workers' barrier while it may write.
    writerWorker: part === 'worker' && config.role === 'api',
    clock: systemClock,
    log: log.child({ component: 'lease' }),
    // A worker fenced alone leaves and is replaced (proxy/workers/instance-lease.ts).
    ...(part === 'worker'
      ? {
          fencedMessage:
            'fenced: this worker lost its database connection and will not serve again; it leaves and its instance starts a new one, unless the instance is fenced too',
        }
      : {}),
    ...(config.shared && part === 'instance'
      ? {
          shared: {
            slot: config.shared.slot,
            advertiseUrl: config.advertiseUrl,
            policy: {
              slots: config.shared.slots,
              downloadBytesPerSec: config.shared.downloadBytesPerSec,
              downloadBytesPerSecPerPrincipal: config.shared.downloadBytesPerSecPerPrincipal,
            },
          },
        }
      : {}),
  });
}
