/** `arkvory_storage_uploads_total`: the store's upload outcomes, read at scrape time. */
import type { Registry } from 'prom-client';
import type { UploadStats } from '../../storage-adapter/store.ts';
import { counter } from './families.ts';

/** Registers the upload family of the process's store. */
export function registerUploadMetrics(registry: Registry, store: { uploadStats(): UploadStats }): void {
  counter(registry, 'arkvory_storage_uploads_total', function () {
    const s = store.uploadStats();
    this.reset();
    for (const outcome of ['committed', 'discarded', 'failed'] as const) this.inc({ outcome }, s[outcome]);
  });
}
