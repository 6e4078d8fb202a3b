/**
 * `arkvory_http_*connections*`, `…_client_timeouts_total`, `arkvory_http2_*`: the front door's
 * counters, read at scrape time.
 */
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
  gauge(registry, 'arkvory_http_max_pending_handshakes', function () {
    this.set(frontDoor.counters().maxPendingHandshakes);
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
  registerHttp2Metrics(registry, frontDoor);
}

/** The HTTP/2 families: zero on a plain-HTTP listener, which has no sessions. */
function registerHttp2Metrics(registry: Registry, frontDoor: { counters(): FrontDoorCounters }): void {
  const h2 = () => frontDoor.counters().http2;
  gauge(registry, 'arkvory_http2_open_sessions', function () {
    this.set(h2().openSessions);
  });
  gauge(registry, 'arkvory_http2_open_streams', function () {
    this.set(h2().openStreams);
  });
  counter(registry, 'arkvory_http2_sessions_total', function () {
    this.reset();
    this.inc(h2().sessions);
  });
  counter(registry, 'arkvory_http2_streams_total', function () {
    this.reset();
    this.inc(h2().streams);
  });
  counter(registry, 'arkvory_http2_goaway_sent_total', function () {
    const goaways = h2().goaways;
    this.reset();
    for (const [reason, n] of Object.entries(goaways)) this.inc({ reason }, n);
  });
  counter(registry, 'arkvory_http2_stream_resets_sent_total', function () {
    const resets = h2().resetsSent;
    this.reset();
    for (const [reason, n] of Object.entries(resets)) this.inc({ reason }, n);
  });
  counter(registry, 'arkvory_http2_stream_resets_received_total', function () {
    this.reset();
    this.inc(h2().resetsReceived);
  });
  counter(registry, 'arkvory_http2_send_budget_waits_total', function () {
    this.reset();
    this.inc(h2().sendBudgetWaits);
  });
  gauge(registry, 'arkvory_http2_send_budget_waiting', function () {
    this.set(h2().sendBudgetWaiting);
  });
  counter(registry, 'arkvory_http2_session_errors_total', function () {
    this.reset();
    this.inc(h2().sessionErrors);
  });
}
