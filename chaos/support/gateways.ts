/**
 * Gateways for chaos scenarios: shared-profile environments, the lease row as PostgreSQL sees it
 * (database clock, same host as the test, so comparable with Date.now()), a streaming download
 * that records when each byte arrived, and small HTTP helpers. Real processes only.
 */
import http from 'node:http';
import type pg from 'pg';
import { inject } from 'vitest';
import { bearer } from '../../test/support/auth.ts';
import type { GatewayProcess } from '../../test/support/gateway.ts';
import { request } from '../../test/support/content.ts';
import { waitUntil } from '../../test/harness/index.ts';

/** Shared-profile variables for one participant (writer: slot 0). */
export function sharedEnv(options: {
  databaseUrl: string;
  role: 'api' | 'reader';
  slot: number;
  slots: number;
  rateBytesPerSec: number;
}): Record<string, string> {
  return {
    ARKVORY_DATABASE_URL: options.databaseUrl,
    ARKVORY_REDIS_URL: inject('redisUrl'),
    ARKVORY_ROLE: options.role,
    ARKVORY_GATEWAY_SLOTS: String(options.slots),
    ARKVORY_GATEWAY_SLOT: String(options.slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(options.rateBytesPerSec),
  };
}

export interface LeaseRow {
  owner: string;
  generation: number;
  /** Database clock, epoch ms. */
  acquiredAtMs: number;
  renewedAtMs: number;
  expiresAtMs: number;
}

export async function leaseRow(pool: pg.Pool, slot: number): Promise<LeaseRow | undefined> {
  const { rows } = await pool.query<{
    owner: string;
    generation: string;
    acquired: number;
    renewed: number;
    expires: number;
  }>(
    `SELECT owner::text, generation::text,
       extract(epoch FROM acquired_at) * 1000 AS acquired, extract(epoch FROM renewed_at) * 1000 AS renewed, extract(epoch FROM expires_at) * 1000 AS expires
     FROM arkvory_gateway_leases WHERE slot = $1`,
    [slot],
  );
  const row = rows[0];
  return row
    ? {
        owner: row.owner,
        generation: Number(row.generation),
        acquiredAtMs: Number(row.acquired),
        renewedAtMs: Number(row.renewed),
        expiresAtMs: Number(row.expires),
      }
    : undefined;
}

/** Milliseconds since the slot's last renewal reached the database (database clock). */
export async function msSinceRenewal(pool: pg.Pool, slot: number): Promise<number> {
  const { rows } = await pool.query<{ ms: number }>(
    `SELECT extract(epoch FROM clock_timestamp() - renewed_at) * 1000 AS ms FROM arkvory_gateway_leases WHERE slot = $1`,
    [slot],
  );
  return Number(rows[0]?.ms ?? Number.NaN);
}

export interface Download {
  status: number;
  received(): Buffer;
  receivedBytes(): number;
  /** Date.now() when the last chunk arrived (undefined before the first). */
  lastChunkAtMs(): number | undefined;
  /** Settles when the response is over: `complete` false when it was cut short. */
  readonly ended: Promise<{ complete: boolean; endedAtMs: number }>;
  isEnded(): boolean;
  cancel(): void;
}

/** Starts a GET and resolves once the headers arrived; the body keeps streaming into memory. */
export function startDownload(url: string, headers: Record<string, string>): Promise<Download> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      let lastAtMs: number | undefined;
      let isEnded = false;
      const expected = Number(res.headers['content-length'] ?? Number.NaN);
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        bytes += chunk.length;
        lastAtMs = Date.now();
      });
      res.on('error', () => {});
      const ended = new Promise<{ complete: boolean; endedAtMs: number }>((settle) => {
        res.once('close', () => {
          isEnded = true;
          settle({ complete: res.complete && bytes === expected, endedAtMs: Date.now() });
        });
      });
      resolve({
        status: res.statusCode ?? 0,
        received: () => Buffer.concat(chunks),
        receivedBytes: () => bytes,
        lastChunkAtMs: () => lastAtMs,
        ended,
        isEnded: () => isEnded,
        cancel: () => req.destroy(),
      });
    });
    req.on('error', reject);
  });
}

/** A GET/HEAD/PUT whose JSON error body is parsed: `{status, code, headers, body}`. */
export async function call(
  url: string,
  options: { method?: string; key?: string; headers?: Record<string, string>; body?: Buffer } = {},
): Promise<{ status: number; code: string | undefined; headers: http.IncomingHttpHeaders; body: Buffer }> {
  const res = await request(url, {
    method: options.method ?? 'GET',
    headers: { ...(options.key ? bearer(options.key) : {}), ...options.headers },
    ...(options.body ? { body: options.body } : {}),
  });
  let code: string | undefined;
  if (String(res.headers['content-type'] ?? '').includes('json')) {
    try {
      code = (JSON.parse(res.body.toString()) as { code?: string }).code;
    } catch {
      code = undefined;
    }
  }
  return { status: res.status, code, headers: res.headers, body: res.body };
}

/** The first JSON log line whose `msg` starts with `prefix`. */
export function logLine(gateway: GatewayProcess, prefix: string): Record<string, unknown> | undefined {
  return gateway.logLines().find((l) => typeof l.msg === 'string' && l.msg.startsWith(prefix));
}

/**
 * The first line whose message starts with `prefix`, waited for at most `timeoutMs`: a line comes
 * to this process through the gateway's stdout, not in step with what its sockets show.
 */
export async function awaitLogLine(
  gateway: GatewayProcess,
  prefix: string,
  options: { timeoutMs: number; what: string },
): Promise<Record<string, unknown>> {
  await waitUntil(() => logLine(gateway, prefix) !== undefined, { ...options, intervalMs: 20 });
  return logLine(gateway, prefix)!;
}

/** A pino line's `time` (ISO) as epoch ms. */
export function logTimeMs(line: Record<string, unknown> | undefined): number {
  return Date.parse(String(line?.time));
}
