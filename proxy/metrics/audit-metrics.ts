/** `arkvory_audit_*`: audit entries an action's answer ended without (docs/observability.md); zero where nothing is audited. */
import type { Registry } from 'prom-client';
import type { AuditFailures } from '../audit/request-audit.ts';
import { counter } from './families.ts';

export function registerAuditMetrics(registry: Registry, failures: Readonly<AuditFailures> | undefined): void {
  counter(registry, 'arkvory_audit_entries_not_recorded_total', function () {
    this.reset();
    this.inc({ reason: 'failed' }, failures?.failed ?? 0);
    this.inc({ reason: 'timeout' }, failures?.timeout ?? 0);
  });
}
