/** `arkvory_secret_rotation*`: secrets taken from rotated files and rotations refused, read at scrape time. */
import type { Registry } from 'prom-client';
import { counter } from './families.ts';

/** What the metrics read from the secret rotation (proxy/config/secret-rotation.ts), by variable. */
export interface SecretRotationStatus {
  readonly rotations: ReadonlyMap<string, number>;
  readonly failures: ReadonlyMap<string, number>;
}

/** Registers the families; one series per secret given as a rotating file (none without such files). */
export function registerSecretMetrics(registry: Registry, status: SecretRotationStatus): void {
  counter(registry, 'arkvory_secret_rotations_total', function () {
    this.reset();
    for (const [secret, n] of status.rotations) this.inc({ secret }, n);
  });
  counter(registry, 'arkvory_secret_rotation_failures_total', function () {
    this.reset();
    for (const [secret, n] of status.failures) this.inc({ secret }, n);
  });
}
