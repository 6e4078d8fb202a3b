import type pg from 'pg';
import type { Logger } from 'pino';
import type { ConnectionUrl } from '../../lib/connection-url.ts';
import type { Clock } from '../../policy/clock.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import type { Config } from '../config/config.ts';
import type { SecretRotation } from '../config/secret-rotation.ts';
import type { Lifecycle } from './lifecycle.ts';
import type { GatewayMetrics } from '../metrics/gateway-metrics.ts';
import type { Transfers } from '../gates/transfers.ts';
import type { WorkerInstance } from '../workers/worker-instance.ts';
import type { CounterStore } from '../../policy/rate-limit/index.ts';

/** What the serve process builds once and hands to each feature module. */
import type { Tracing } from '../tracing/tracing.ts';

export interface Services {
  readonly config: Config;
  readonly log: Logger;
  readonly pool: pg.Pool;
  /** URL of the same database, for connections of their own (LISTEN, the lease); its password may rotate. */
  readonly databaseUrl: ConnectionUrl;
  /** True when PostgreSQL is the embedded default (standalone, first-run conveniences apply). */
  readonly isEmbeddedDatabase: boolean;
  /** This gateway's standing (the slot lease of the shared profile, its process's or its instance's); `isPermitted()` is false once fenced. */
  readonly coordinator: LeaseStanding;
  /** Bandwidth governors and admission: every body stream goes through `admit` and a `meter`. */
  readonly transfers: Transfers;
  readonly clock: Clock;
  readonly lifecycle: Lifecycle;
  /** Run first on shutdown, before in-flight requests are awaited (admission queues close here). */
  readonly preClose: Array<() => void | Promise<void>>;
  /** Run last on shutdown, after the HTTP server closed, before the pool ends. */
  readonly onClose: Array<() => void | Promise<void>>;
  /**
   * Extra fields for `/health/status` and `/health/ready` (public: states and codes only, no address,
   * id or path): the store's health.
   */
  readonly status: Array<() => Record<string, unknown>>;
  /** Extra fields for `/health/ready`; each provider returns aggregates only, never ids or paths. */
  readonly readiness: Array<() => Record<string, unknown>>;
  /**
   * The secrets in use now (`secrets.config`): read where a connection is opened or a request signed,
   * so a rotated secret file reaches them without a restart. Absent: `config`'s, fixed.
   */
  readonly secrets?: SecretRotation | undefined;
  /** Prometheus metrics; each module registers the families of what it builds (absent: nothing is exported). */
  readonly metrics?: GatewayMetrics;
  /** OpenTelemetry tracing (docs/tracing.md); absent when off. */
  readonly tracing?: Tracing | undefined;
  /** This process is one worker of an instance (ARKVORY_WORKERS above 1); absent: the instance is this process. */
  readonly instance?: WorkerInstance | undefined;
  /**
   * The instance's rate-limit counters when they are not this process's (a worker with no Redis);
   * absent: Redis, or this process's memory.
   */
  readonly counters?: CounterStore | undefined;
  /** Run before `/health/status` and `/health/ready` read their providers (a worker reads the instance's state). */
  readonly beforeHealth?: Array<() => Promise<void>>;
}
