import { pino, type Logger, type DestinationStream } from 'pino';
import type { LogLevel } from '../config/config.ts';

/**
 * Paths pino blanks before a line is written. Keys, tokens and Authorization headers must never
 * reach a log line, whatever object carries them.
 */
export const REDACT_PATHS = [
  'authorization',
  'cookie',
  'key',
  'secret',
  'token',
  'password',
  'apiKey',
  'databaseUrl',
  'redisUrl',
  'headers.authorization',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  '*.authorization',
  '*.key',
  '*.secret',
  '*.token',
  '*.password',
];

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}

export type { Logger };
