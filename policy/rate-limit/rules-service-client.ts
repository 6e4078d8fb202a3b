/**
 * The HTTP transport to a rules service (undici): `POST <url>/api/v1/rules/query` with the query as
 * JSON, on one keep-alive pool. A 200 with a JSON body resolves; anything else rejects with a
 * `RulesServiceError` (`error`, or `invalid` for a body that is not JSON, nests deeper than
 * MAX_JSON_DEPTH or is longer than `RULES_ANSWER_MAX_BYTES`). The caller's timeout (remote-rules.ts) bounds the wait;
 * `headersTimeout`/`bodyTimeout` here stop a stuck socket. The byte bound stops a service that sends
 * a huge answer fast: without it the whole body was buffered and parsed, in every gateway process,
 * once per concurrent miss.
 * undici is loaded with the first query: a gateway without a rules service never loads it.
 */
import type { Pool } from 'undici';
import { JsonTooDeepError, parseBoundedJson } from '../../lib/bounded-json.ts';
import { RulesServiceError, type RulesTransport } from './remote-rules.ts';

export const RULES_QUERY_PATH = '/api/v1/rules/query';
/** Longest answer read: far above any real one (rules-answer.ts bounds its rules), far below harm. */
export const RULES_ANSWER_MAX_BYTES = 1024 * 1024;

export interface RulesServiceClient {
  readonly transport: RulesTransport;
  close(): Promise<void>;
}

export function createRulesServiceClient(options: {
  url: string;
  timeoutMs: number;
  /** The bearer token, or a function read per query (the token file rotates without a restart). */
  token?: string | undefined | (() => string | undefined);
  connections?: number;
}): RulesServiceClient {
  const base = new URL(options.url);
  const path = `${base.pathname.replace(/\/$/, '')}${RULES_QUERY_PATH}`;
  let opened: Promise<Pool> | undefined;
  const pool = () =>
    (opened ??= import('undici').then(
      (undici) =>
        new undici.Pool(base.origin, {
          connections: options.connections ?? 16,
          connectTimeout: Math.max(options.timeoutMs, 50),
          headersTimeout: Math.max(options.timeoutMs * 2, 1000),
          bodyTimeout: Math.max(options.timeoutMs * 2, 1000),
          keepAliveTimeout: 30_000,
        }),
    ));
  const plain: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  const { token } = options;
  let signed: { token: string; headers: Record<string, string> } | undefined;
  const headersNow = (): Record<string, string> => {
    const now = typeof token === 'function' ? token() : token;
    if (!now) return plain;
    if (signed?.token !== now) signed = { token: now, headers: { ...plain, authorization: `Bearer ${now}` } };
    return signed.headers;
  };
  return {
    async transport(query, signal) {
      let res: Awaited<ReturnType<Pool['request']>>;
      const headers = headersNow();
      try {
        res = await (await pool()).request({ method: 'POST', path, headers, body: JSON.stringify(query), signal });
      } catch (err) {
        const code = (err as { code?: string }).code;
        throw new RulesServiceError(
          code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' ? 'timeout' : 'error',
          `rules service unreachable (${code ?? (err as Error).message})`,
          { cause: err },
        );
      }
      if (res.statusCode !== 200) {
        await res.body.dump().catch(() => {});
        const retryAfterMs =
          res.statusCode === 503 || res.statusCode === 429
            ? retryAfterMsOf(res.headers['retry-after'], Date.now())
            : undefined;
        throw new RulesServiceError('error', `rules service answered ${res.statusCode}`, { retryAfterMs });
      }
      const declared = Number(res.headers['content-length']);
      if (declared > RULES_ANSWER_MAX_BYTES) {
        res.body.destroy();
        throw tooLong();
      }
      const chunks: Buffer[] = [];
      let bytes = 0;
      try {
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          bytes += chunk.length;
          if (bytes > RULES_ANSWER_MAX_BYTES) {
            res.body.destroy();
            throw tooLong();
          }
          chunks.push(chunk);
        }
      } catch (err) {
        if (err instanceof RulesServiceError) throw err;
        throw new RulesServiceError('error', 'rules service answer cut short', { cause: err });
      }
      const text = Buffer.concat(chunks, bytes).toString('utf8');
      try {
        // Bounded before validation: its messages quote values, and a value thousands of levels
        // deep overflowed the stack there, counted as `error` instead of the service's `invalid`.
        return parseBoundedJson(text);
      } catch (err) {
        if (err instanceof JsonTooDeepError)
          throw new RulesServiceError(
            'invalid',
            `rules service answer nests arrays and objects deeper than ${err.maxDepth} levels`,
          );
        throw new RulesServiceError('invalid', 'rules service answer is not JSON', { cause: err });
      }
    },
    close: async () => {
      if (opened) await (await opened).close();
    },
  };
}

const tooLong = () =>
  new RulesServiceError('invalid', `rules service answer is longer than ${RULES_ANSWER_MAX_BYTES} bytes`);

/** The HTTP-date form senders must use (RFC 9110 5.6.7): `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * A Retry-After value (RFC 9110 10.2.3: delay-seconds, or an IMF-fixdate) as milliseconds from
 * `nowMs`; undefined when absent or unreadable. A date in the past is 0.
 */
export function retryAfterMsOf(value: string | string[] | undefined, nowMs: number): number | undefined {
  const text = (Array.isArray(value) ? value[0] : value)?.trim();
  if (!text) return undefined;
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!IMF_FIXDATE.test(text)) return undefined;
  const atMs = Date.parse(text);
  return Number.isNaN(atMs) ? undefined : Math.max(0, atMs - nowMs);
}
