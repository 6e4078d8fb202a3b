import { type Logger, pino } from 'pino';

/** A pino logger at `level` whose lines are parsed into `lines` as they are written (synchronously). */
export function capturedLog<Line = Record<string, unknown>>(level = 'info'): { log: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const log = pino({ level }, { write: (text: string) => lines.push(JSON.parse(text) as Line) });
  return { log, lines };
}
