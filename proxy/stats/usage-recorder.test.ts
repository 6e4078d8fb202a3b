/**
 * Which answers the usage recorder counts as downloads: a 200 or 206 of which some body went out (or
 * that finished, an empty artifact's); not a request whose client left before the answer (499), nor
 * one whose head was written but whose client left before its first body byte.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { FakeUsageDb } from '../../test/support/fake-usage-db.ts';
import { CONTENT_TEMPLATES } from '../content/paths.ts';
import type { RequestContext, RequestObservation } from '../server/route-types.ts';
import { startUsageRecorder } from './usage-recorder.ts';

const clock = { wallMs: () => Date.UTC(2026, 11, 5, 12), monotonicMs: () => 0 };
const route = `${CONTENT_TEMPLATES.artifact}/content`;

/** The downloads and bytes the recorder flushes after observing each answer of `answers`. */
async function flushed(
  answers: Array<{ status: number; bytesOut: number; finished: boolean; declaredLength?: number }>,
): Promise<{ downloads: number[]; bytes: number[] }> {
  const db = new FakeUsageDb();
  const recorder = startUsageRecorder({ pool: db, log: pino({ level: 'silent' }), clock, flushMs: 3_600_000 });
  for (const a of answers) {
    const ctx = {
      principal: { id: '00000000-0000-4000-8000-000000000001' },
      params: { repo: 'r', id: 'a.bin' },
      req: { headers: {}, complete: true },
      res: { writableFinished: a.finished, declaredLength: a.declaredLength },
    } as unknown as RequestContext;
    const o: RequestObservation = {
      method: 'GET',
      route,
      status: a.status,
      seconds: 1,
      bytesIn: 0,
      bytesOut: a.bytesOut,
    };
    recorder.observe(ctx, o);
  }
  await recorder.stop();
  const params = db.committed.inserts[0] ?? [];
  return { downloads: (params[5] as number[] | undefined) ?? [], bytes: (params[6] as number[] | undefined) ?? [] };
}

describe('usage recorder: what is a download', () => {
  it('a client gone before the answer (499) is none', async () => {
    expect((await flushed([{ status: 499, bytesOut: 0, finished: false }])).downloads).toEqual([]);
  });

  it('a 200 whose client left before its first body byte is none', async () => {
    expect((await flushed([{ status: 200, bytesOut: 0, finished: false, declaredLength: 10 }])).downloads).toEqual([]);
  });

  it('a 200 or 206 cut after its body began is one, with the bytes it got', async () => {
    expect(
      await flushed([
        { status: 200, bytesOut: 300, finished: false, declaredLength: 1000 },
        { status: 206, bytesOut: 50, finished: false, declaredLength: 100 },
      ]),
    ).toEqual({ downloads: [2], bytes: [350] });
  });

  it('a finished one is one, an empty artifact too, with its declared length', async () => {
    expect(
      await flushed([
        { status: 200, bytesOut: 0, finished: true, declaredLength: 0 },
        { status: 200, bytesOut: 1200, finished: true, declaredLength: 1000 },
      ]),
    ).toEqual({ downloads: [2], bytes: [1000] });
  });
});
