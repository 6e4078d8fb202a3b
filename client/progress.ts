/**
 * Pure progress reporting: a one-line bar with rate and ETA for a terminal, a JSON object per
 * report otherwise (CI logs, scripts). The caller decides when to render.
 */

export interface Progress {
  /** Bytes in the final file so far (resumed bytes included). */
  readonly bytes: number;
  /** Total size, or -1 while unknown. */
  readonly total: number;
  /** Bytes this run transferred, and for how long, for the rate. */
  readonly transferred: number;
  readonly elapsedMs: number;
  readonly attempt: number;
  /** The gateway currently in use. */
  readonly url: string;
  readonly done: boolean;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(n: number): string {
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${UNITS[unit]}`;
}

export function rateBytesPerSecond(p: Progress): number {
  return p.elapsedMs > 0 ? (p.transferred * 1000) / p.elapsedMs : 0;
}

/** Seconds left at the current rate, or undefined when unknown. */
export function etaSeconds(p: Progress): number | undefined {
  const rate = rateBytesPerSecond(p);
  if (p.total < 0 || rate <= 0) return undefined;
  return Math.ceil((p.total - p.bytes) / rate);
}

function formatDuration(seconds: number | undefined): string {
  if (seconds === undefined) return '--:--';
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  const mm = String(m).padStart(2, '0');
  const ss = String(s).padStart(2, '0');
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

/** `[#########.........]  45% 4.5 MiB/10.0 MiB 1.2 MiB/s ETA 00:05` within `width` columns. */
export function progressBar(p: Progress, width = 80): string {
  const fraction = p.total > 0 ? Math.min(p.bytes / p.total, 1) : p.done ? 1 : 0;
  const tail = ` ${String(Math.floor(fraction * 100)).padStart(3)}% ${formatBytes(p.bytes)}/${p.total >= 0 ? formatBytes(p.total) : '?'} ${formatBytes(rateBytesPerSecond(p))}/s ETA ${p.done ? '00:00' : formatDuration(etaSeconds(p))}`;
  const barWidth = Math.max(width - tail.length - 2, 10);
  const filled = Math.round(fraction * barWidth);
  return `[${'#'.repeat(filled)}${'.'.repeat(barWidth - filled)}]${tail}`;
}

/** One JSON line per report (no newline). */
export function progressJson(p: Progress): string {
  return JSON.stringify({
    event: p.done ? 'done' : 'progress',
    bytes: p.bytes,
    total: p.total,
    bytesPerSecond: Math.round(rateBytesPerSecond(p)),
    etaSeconds: etaSeconds(p) ?? null,
    attempt: p.attempt,
    url: shownUrl(p.url),
  });
}

/**
 * The URL as a line shows it: without the query (a pre-signed link's signature) and without user
 * info (`https://ci:<key>@gw/…`, which is never sent but would be printed). The parser decides what
 * is user info: a password may hold `?`, so the query is not cut first.
 */
function shownUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return '<unparseable URL>';
  }
  if (parsed.username === '' && parsed.password === '') return url.replace(/\?.*$/, '');
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}
