import { pino, type Logger, type DestinationStream } from 'pino';
import type { LogLevel } from '../config/config.ts';

const CENSOR = '[redacted]';

/**
 * Paths pino blanks before a line is written. Keys, tokens and Authorization headers must never
 * reach a log line, whatever object carries them. Beyond the object logged (which
 * `redactSecretKeys` also walks, at any depth), these cover a child logger's bindings and an
 * object interpolated into the message (`%o`). Each path costs on every line that has its first
 * key, and a `*.` path on every value of every line: deeper matching is left to the walk.
 */
export const REDACT_PATHS = [
  'authorization',
  'Authorization',
  '["proxy-authorization"]',
  '["x-api-key"]',
  'cookie',
  'key',
  'secret',
  'token',
  'password',
  'apiKey',
  'sessionCookie',
  'csrfToken',
  'databaseUrl',
  'redisUrl',
  'headers.authorization',
  'headers.Authorization',
  'headers["proxy-authorization"]',
  'headers["x-api-key"]',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.Authorization',
  'req.headers["proxy-authorization"]',
  'req.headers["x-api-key"]',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  '*.authorization',
  '*.key',
  '*.secret',
  '*.token',
  '*.password',
];

/**
 * Names (compared in lower case) whose value is blanked at any depth of a logged object, arrays
 * and errors included. Not `key`: deeper down it is mostly an object name, kept for debugging; the
 * paths above blank it on the first two levels.
 */
const SECRET_KEYS: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'apikey',
  'secret',
  'token',
  'password',
  'sessioncookie',
  'csrftoken',
  'databaseurl',
  'redisurl',
  'secretaccesskey',
  'sessiontoken',
]);

/** Deeper than any object this gateway logs; bounds the walk over whatever else is handed in. */
const MAX_DEPTH = 8;

/** Whether the walk looks inside: data (plain objects, arrays) and errors, never class instances or buffers. */
function walked(value: object): boolean {
  if (Array.isArray(value) || value instanceof Error) return true;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A copy to blank properties in, never the caller's object (which may be frozen). */
function copyOf(value: object): Record<string, unknown> {
  if (Array.isArray(value)) return [...value] as unknown as Record<string, unknown>;
  if (!(value instanceof Error)) return Object.assign(Object.create(Object.getPrototypeOf(value)), value);
  // An error stays one: pino's serializer reads its message, stack and cause, own but not
  // enumerable. Values are read off the original: V8's `stack` getter works on no other object.
  const copy = Object.create(Object.getPrototypeOf(value));
  for (const [key, { enumerable }] of Object.entries(Object.getOwnPropertyDescriptors(value)))
    Object.defineProperty(copy, key, {
      value: (value as unknown as Record<string, unknown>)[key],
      enumerable,
      writable: true,
      configurable: true,
    });
  return copy;
}

/**
 * `value` with every property named in SECRET_KEYS blanked, at any depth: the object itself when
 * there is none (the common line costs a walk over its keys, nothing more), otherwise copies of
 * the objects on the way to one.
 */
function redactSecretKeys<T>(value: T, depth = 0, path: Set<object> = new Set()): T {
  if (typeof value !== 'object' || value === null || depth > MAX_DEPTH || !walked(value)) return value;
  // A cycle back to an object being copied would reach its original, secrets and all.
  if (path.has(value)) return '[Circular]' as T;
  path.add(value);
  const source = value as Record<string, unknown>;
  const keys = Object.keys(source);
  if (value instanceof Error && Object.hasOwn(value, 'cause')) keys.push('cause');
  let copy: Record<string, unknown> | undefined;
  for (const key of keys) {
    const inner = source[key];
    const next =
      inner !== undefined && SECRET_KEYS.has(key.toLowerCase()) ? CENSOR : redactSecretKeys(inner, depth + 1, path);
    if (next !== inner) (copy ??= copyOf(value))[key] = next;
  }
  path.delete(value);
  return (copy ?? value) as T;
}

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: CENSOR },
      formatters: { level: (label) => ({ level: label }), log: (object) => redactSecretKeys(object) },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}

export type { Logger };
