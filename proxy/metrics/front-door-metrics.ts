/** `arkvory_http_*connections*`, `…_client_timeouts_total`: the front door's counters, read at scrape time. */
import type { Registry } from 'prom-client';
import type { FrontDoorCounters } from '../server/front-door.ts';
import { counter, gauge } from './families.ts';

/** Registers the connection families of the process's HTTP front door. */
export function registerFrontDoorMetrics(registry: Registry, frontDoor: { counters(): FrontDoorCounters }): void {
  gauge(registry, 'arkvory_http_open_connections', function () {
    this.set(frontDoor.counters().open);
  });
  gauge(registry, 'arkvory_http_max_connections', function () {
    this.set(frontDoor.counters().maxConnections);
  });
  counter(registry, 'arkvory_http_connections_refused_total', function () {
    this.reset();
    this.inc(frontDoor.counters().refused);
  });
  counter(registry, 'arkvory_http_idle_connections_closed_total', function () {
    this.reset();
    this.inc(frontDoor.counters().idleClosed);
  });
  counter(registry, 'arkvory_http_client_timeouts_total', function () {
    const t = frontDoor.counters().timeouts;
    this.reset();
    this.inc({ phase: 'body' }, t.body);
    this.inc({ phase: 'send' }, t.send);
  });
}
