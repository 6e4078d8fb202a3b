/** `arkvory_tls_*`: the certificate served to new handshakes and its rejected reloads, read at scrape time. */
import type { Registry } from 'prom-client';
import { counter, gauge } from './families.ts';

/** What the TLS metrics read from the served certificate (proxy/tls/served-tls.ts). */
export interface TlsStatus {
  readonly certificate: { readonly serial: string; readonly notAfterMs: number };
  readonly reloadFailures: number;
}

/** Registers the TLS families; without TLS (`undefined`) they export no series, or zero. */
export function registerTlsMetrics(registry: Registry, tls: TlsStatus | undefined): void {
  gauge(registry, 'arkvory_tls_certificate_expiry_timestamp_seconds', function () {
    this.reset();
    if (tls) this.set({ serial: tls.certificate.serial }, Math.floor(tls.certificate.notAfterMs / 1000));
  });
  counter(registry, 'arkvory_tls_reload_failures_total', function () {
    this.reset();
    this.inc(tls?.reloadFailures ?? 0);
  });
}
