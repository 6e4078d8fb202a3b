import type { IncomingMessage } from 'node:http';
import { JsonTooDeepError, MAX_JSON_DEPTH, parseBoundedJson } from '../../lib/bounded-json.ts';
import { GatewayError } from './errors.ts';

/**
 * `application/json`, with parameters at most (`charset=utf-8`, the only one JSON has): not a type
 * that merely starts so (`application/jsonx`), nor a JSON-based one (`application/json-patch+json`,
 * `application/merge-patch+json`), whose body means something else than the route reads; nor a
 * charset other than UTF-8, which the body would be misread in.
 */
export function isPlainJsonType(type: string): boolean {
  const m = /^\s*application\/json\s*(;.*)?$/is.exec(type);
  if (!m) return false;
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(m[1] ?? '');
  return charset === null || /^utf-?8$/i.test(charset[1]!);
}

/**
 * Reads a small JSON request body (every route that takes one: admin, console, the rules service, a
 * multipart completion, a presign); larger than `maxBytes` → 413, bad JSON or JSON nested deeper than
 * MAX_JSON_DEPTH → 400 (lib/bounded-json.ts: checked on the text, before anything walks the value). A body past the bound is refused by its Content-Length before it is read,
 * else once it crosses; the request is left undestroyed either way, so the 413 reaches the client
 * (the front door discards the rest and closes: lingering-close.ts) instead of a reset.
 */
export async function readJsonBody(req: IncomingMessage, maxBytes = 64 * 1024): Promise<Record<string, unknown>> {
  const type = req.headers['content-type'] ?? '';
  const tooLarge = () => new GatewayError('payload_too_large', `JSON bodies are limited to ${maxBytes} bytes.`);
  if (Number(req.headers['content-length']) > maxBytes) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false })) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw tooLarge();
    chunks.push(chunk as Buffer);
  }
  if (size === 0) return {};
  if (!isPlainJsonType(type))
    throw new GatewayError('invalid_request', 'Send JSON with Content-Type: application/json.');
  let value: unknown;
  let hasNul = false;
  try {
    // PostgreSQL text cannot hold U+0000: refused here as the client's error, not a 500 later.
    value = parseBoundedJson(Buffer.concat(chunks).toString('utf8'), (key, v: unknown) => {
      if (key.includes('\0') || (typeof v === 'string' && v.includes('\0'))) hasNul = true;
      return v;
    });
  } catch (err) {
    if (err instanceof JsonTooDeepError)
      throw new GatewayError(
        'invalid_request',
        `The body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels; no route takes such a body.`,
      );
    throw new GatewayError('invalid_request', 'The body is not valid JSON.');
  }
  if (hasNul) throw new GatewayError('invalid_request', 'JSON strings may not contain U+0000.');
  if (!value || typeof value !== 'object' || Array.isArray(value))
    throw new GatewayError('invalid_request', 'The body must be a JSON object.');
  return value as Record<string, unknown>;
}
