import { describe, expect, it } from 'vitest';
import { configuredCeilings, describeCeilings } from './ceilings.ts';
import { loadConfig } from '../config/config.ts';

describe('startup ceilings line', () => {
  it('states the defaults: no byte ceilings, the admission bounds and the upload size', () => {
    const c = configuredCeilings(loadConfig({}, '/'));
    expect(describeCeilings(c)).toBe(
      'downloads no ceiling (no ceiling per principal), 256 at once (4 per principal); uploads no ceiling (no ceiling per principal), 1 at once per principal, at most 10 GiB each',
    );
  });

  it("states configured ceilings, and the shared profile's share instead of the local download rate", () => {
    const local = configuredCeilings(
      loadConfig(
        {
          ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(100 * 1048576),
          ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: '1000',
          ARKVORY_UPLOAD_BYTES_PER_SECOND: '1048576',
          ARKVORY_MAX_DOWNLOADS: '8',
        },
        '/',
      ),
    );
    expect(describeCeilings(local)).toBe(
      'downloads 100 MiB/s (1000 B/s per principal), 8 at once (4 per principal); uploads 1 MiB/s (no ceiling per principal), 1 at once per principal, at most 10 GiB each',
    );
    const shared = configuredCeilings(
      loadConfig(
        {
          ARKVORY_GATEWAY_SLOTS: '4',
          ARKVORY_GATEWAY_SLOT: '1',
          ARKVORY_ROLE: 'reader',
          ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(4 * 1048576),
          ARKVORY_DATABASE_URL: 'postgres://x@h/db',
          ARKVORY_REDIS_URL: 'redis://h:6379',
        },
        '/',
      ),
    );
    expect(shared.downloadBytesPerSecond).toBe(1048576);
  });
});
