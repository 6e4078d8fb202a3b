/** prom-client families made from their catalogue entry, so name, help and labels are declared once. */
import { Counter, Gauge, type Registry } from 'prom-client';
import { type GatewayMetricName, specOf } from './catalogue.ts';

export function counter(registry: Registry, name: GatewayMetricName, collect?: (this: Counter) => void): Counter {
  const spec = specOf(name);
  return new Counter({
    name,
    help: spec.help,
    labelNames: spec.labels,
    registers: [registry],
    ...(collect ? { collect } : {}),
  });
}

export function gauge(registry: Registry, name: GatewayMetricName, collect: (this: Gauge) => void): Gauge {
  const spec = specOf(name);
  return new Gauge({ name, help: spec.help, labelNames: spec.labels, registers: [registry], collect });
}
