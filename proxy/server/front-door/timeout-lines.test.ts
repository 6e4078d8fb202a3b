import { expect, it } from 'vitest';
import { capturedLog } from '../../../test/support/captured-log.ts';
import { TimeoutLines } from './timeout-lines.ts';

it('writes 5 lines a minute per phase at info, the rest at debug, and the next written says how many went there', () => {
  const { log, lines } = capturedLog<{ level: number; phase: string; suppressed?: number }>('debug');
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
