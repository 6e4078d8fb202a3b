import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import { ManualTimers, settle } from '../timers.ts';
import { BandwidthGovernor, type ByteMeter } from './bandwidth-governor.ts';
import { createMeteredTransform, meterChunks, splitChunk, writeMetered } from './throttle.ts';

function setup(rateBytesPerSec: number) {
  const clock = new ManualClock(0, 0);
  const timers = new ManualTimers(clock);
  const governor = new BandwidthGovernor({ rateBytesPerSec, perPrincipalBytesPerSec: 0, clock, timers });
  return { clock, timers, governor };
}

function bytes(length: number, fill = 7): Buffer {
  return Buffer.alloc(length, fill);
}

/** A Writable that keeps what it gets and only calls back when told to (a slow client). */
class SlowSink extends Writable {
  readonly received: Buffer[] = [];
  readonly #callbacks: (() => void)[] = [];
  constructor(highWaterMark: number) {
    super({ highWaterMark });
  }
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.received.push(chunk);
    this.#callbacks.push(callback);
  }
  flush(): void {
    for (const callback of this.#callbacks.splice(0)) callback();
  }
  get total(): number {
    return this.received.reduce((sum, chunk) => sum + chunk.length, 0);
  }
}

describe('splitChunk', () => {
  it('splits into views of at most one quantum, without copying', () => {
    const source = bytes(2500);
    const pieces = [...splitChunk(source, 1024)];
    expect(pieces.map((p) => p.length)).toEqual([1024, 1024, 452]);
    expect(pieces[1]!.buffer).toBe(source.buffer);
    expect([...splitChunk(bytes(0), 1024)]).toEqual([]);
  });
});

describe('meterChunks (uploads: reading paced with backpressure)', () => {
  it('yields quantum-sized pieces only as the bucket allows, and stops reading the source meanwhile', async () => {
    const { governor, timers } = setup(10_240); // burst and quantum 1024: 10 KiB/s
    let pulled = 0;
    const source = Readable.from(
      (function* () {
        for (let i = 0; i < 4; i++) {
          pulled++;
          yield bytes(3000, i);
        }
      })(),
      { objectMode: false, highWaterMark: 1 },
    );
    const received: Buffer[] = [];
    const done = (async () => {
      for await (const piece of meterChunks(source, governor.meter('uploader'))) received.push(piece);
    })();
    await settle();
    expect(received.map((p) => p.length)).toEqual([1024]);
    const pulledEarly = pulled;
    expect(pulledEarly).toBeLessThanOrEqual(3); // the source is not drained ahead of the meter
    await timers.advance(1000);
    // 1 s at 10 KiB/s plus the 1 KiB burst, less what is waiting for the next piece (3000-byte
    // chunks split into 1024 + 1024 + 952).
    const afterOneSecond = received.reduce((sum, p) => sum + p.length, 0);
    expect(afterOneSecond).toBeLessThanOrEqual(11 * 1024);
    expect(afterOneSecond).toBeGreaterThan(10 * 1024);
    await timers.advance(200);
    await done;
    const all = Buffer.concat(received);
    expect(all.length).toBe(12_000);
    expect(all.equals(Buffer.concat([0, 1, 2, 3].map((i) => bytes(3000, i))))).toBe(true);
    expect(received.every((p) => p.length <= 1024)).toBe(true);
  });

  it('a fenced governor fails the upload stream with lease_lost', async () => {
    const { governor, timers } = setup(10_240);
    const meter = governor.meter('uploader');
    const reading = (async () => {
      for await (const _ of meterChunks(Readable.from([bytes(4096)]), meter)) void _;
    })();
    await settle();
    governor.fence();
    await expect(reading).rejects.toMatchObject({ code: 'lease_lost' });
    await timers.advance(1000);
  });
});

describe('writeMetered and createMeteredTransform (downloads: handing bytes to the response)', () => {
  it('writeMetered writes metered pieces and waits for drain', async () => {
    const { governor, timers } = setup(10_240);
    const sink = new SlowSink(1024);
    const writing = writeMetered(sink, bytes(2048), governor.meter('reader'));
    await settle();
    expect(sink.total).toBe(1024); // first quantum from the burst; the sink is now full
    await timers.advance(100); // second quantum granted, but the sink has not drained
    expect(sink.total).toBe(1024);
    sink.flush();
    await settle();
    expect(sink.total).toBe(2048);
    sink.flush();
    await writing;
  });

  it('writeMetered rejects when the response closes while waiting for drain', async () => {
    const { governor } = setup(0);
    const sink = new SlowSink(16);
    const writing = writeMetered(sink, bytes(64), governor.meter('reader'));
    await settle();
    sink.destroy();
    await expect(writing).rejects.toThrow(/closed/);
  });

  it('the Transform paces a pipeline to the rate and passes every byte unchanged', async () => {
    const { governor, timers } = setup(10_240);
    const source = Readable.from([bytes(5120, 1), bytes(5120, 2)]);
    const received: Buffer[] = [];
    const total = (): number => received.reduce((sum, chunk) => sum + chunk.length, 0);
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        received.push(chunk);
        callback();
      },
    });
    const piping = pipeline(source, createMeteredTransform(governor.meter('reader')), sink);
    await settle();
    expect(total()).toBe(1024);
    await timers.advance(500);
    expect(total()).toBe(6 * 1024);
    await timers.advance(500);
    await piping;
    expect(Buffer.concat(received).equals(Buffer.concat([bytes(5120, 1), bytes(5120, 2)]))).toBe(true);
    expect(received.every((c) => c.length <= 1024)).toBe(true);
    expect(governor.snapshot().grantedBytes).toBe(10_240);
  });

  it('destroying the Transform (client gone) cancels its waiting take', async () => {
    const { governor } = setup(10_240);
    const transform = createMeteredTransform(governor.meter('reader'));
    transform.on('error', () => {});
    transform.write(bytes(4096));
    await settle();
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 1024, waitingQuanta: 1 });
    transform.destroy(new Error('client went away'));
    await settle();
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 1024, waitingQuanta: 0 });
  });

  it('the Transform errors the pipeline when the take rejects (shutdown)', async () => {
    const { governor } = setup(10_240);
    const meter: ByteMeter = governor.meter('reader');
    const piping = pipeline(Readable.from([bytes(4096)]), createMeteredTransform(meter), new SlowSink(1 << 20));
    await settle();
    governor.close();
    await expect(piping).rejects.toMatchObject({ code: 'unavailable' });
  });
});
