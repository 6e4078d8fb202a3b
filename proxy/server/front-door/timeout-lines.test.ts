import { Writable } from 'node:stream';
import { pino } from 'pino';
import { expect, it } from 'vitest';
import { TimeoutLines } from './timeout-lines.ts';

it('writes 5 lines a minute per phase at info, the rest at debug, and the next written says how many went there', () => {
  const lines: Array<{ level: number; phase: string; suppressed?: number }> = [];
  const log = pino(
    { level: 'debug' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const text of chunk.toString('utf8').split('\n')) if (text !== '') lines.push(JSON.parse(text));
        done();
      },
    }),
  );
  let now = 0;
  const timeouts = new TimeoutLines(log, () => now);
  const body = { code: 'client_timeout', phase: 'request_body' } as const;
  for (let i = 0; i < 9; i++) timeouts.write(body, 'stalled');
  timeouts.write({ code: 'client_timeout', phase: 'response' }, 'not taken');
  const atInfo = (phase: string) => lines.filter((l) => l.level === 30 && l.phase === phase);
  expect(atInfo('request_body')).toHaveLength(5);
  expect(lines.filter((l) => l.level === 20)).toHaveLength(4);
  expect(atInfo('response')).toHaveLength(1);
  now = 60_000;
  timeouts.write(body, 'stalled');
  expect(lines.at(-1)).toMatchObject({ level: 30, phase: 'request_body', suppressed: 4 });
});
