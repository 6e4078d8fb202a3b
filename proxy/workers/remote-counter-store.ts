/** A worker's rate-limit counters and bans with no Redis: the instance's, kept by the coordinating process. */
import type { CounterStore } from '../../policy/rate-limit/index.ts';
import type { Link } from './link.ts';

export function remoteCounterStore(link: Link): CounterStore {
  return {
    kind: 'memory',
    run: (plan, input) => link.call('counters.run', [plan, input]),
    clear: (keys) => link.call('counters.clear', [...keys]),
  };
}
