/** The configured ceilings as one startup log line: what this process will enforce. Pure. */
import type { Config } from '../config/config.ts';
import { downloadCeilings } from '../gates/transfers.ts';

export interface Ceilings {
  downloadBytesPerSecond: number;
  downloadBytesPerSecondPerPrincipal: number;
  uploadBytesPerSecond: number;
  uploadBytesPerSecondPerPrincipal: number;
  maxDownloads: number;
  maxDownloadsPerPrincipal: number;
  maxUploadsPerPrincipal: number;
  maxUploadBytes: number;
}

export function configuredCeilings(config: Config): Ceilings {
  const download = downloadCeilings(config);
  return {
    downloadBytesPerSecond: download.downloadBytesPerSec,
    downloadBytesPerSecondPerPrincipal: download.downloadBytesPerSecPerPrincipal,
    uploadBytesPerSecond: config.bandwidth.uploadBytesPerSec,
    uploadBytesPerSecondPerPrincipal: config.bandwidth.uploadBytesPerSecPerPrincipal,
    maxDownloads: config.admission.maxDownloads,
    maxDownloadsPerPrincipal: config.admission.maxDownloadsPerPrincipal,
    maxUploadsPerPrincipal: config.admission.maxUploadsPerPrincipal,
    maxUploadBytes: config.maxUploadBytes,
  };
}

function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1 && value % 1024 === 0) {
    value /= 1024;
    unit++;
  }
  return `${value} ${units[unit]}`;
}

const rate = (n: number) => (n === 0 ? 'no ceiling' : `${bytes(n)}/s`);

/** e.g. "downloads 100 MiB/s (20 MiB/s per principal), 256 at once (4 per principal); uploads no ceiling (no ceiling per principal), 1 per principal, at most 10 GiB each" */
export function describeCeilings(c: Ceilings): string {
  return (
    `downloads ${rate(c.downloadBytesPerSecond)} (${rate(c.downloadBytesPerSecondPerPrincipal)} per principal), ${c.maxDownloads} at once (${c.maxDownloadsPerPrincipal} per principal); ` +
    `uploads ${rate(c.uploadBytesPerSecond)} (${rate(c.uploadBytesPerSecondPerPrincipal)} per principal), ${c.maxUploadsPerPrincipal} at once per principal, at most ${bytes(c.maxUploadBytes)} each`
  );
}
