import { describe, expect, it } from 'vitest';
import { releaseBuffer } from './release-buffer.ts';

describe('releaseBuffer', () => {
  it('frees a buffer that is its whole ArrayBuffer: its memory leaves the process at once', () => {
    const before = process.memoryUsage().arrayBuffers;
    const chunks = Array.from({ length: 64 }, () => Buffer.alloc(64 * 1024, 7));
    expect(process.memoryUsage().arrayBuffers - before).toBeGreaterThanOrEqual(4 * 1024 * 1024);
    for (const chunk of chunks) releaseBuffer(chunk);
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(1024 * 1024);
    for (const chunk of chunks) {
      expect(chunk.length).toBe(0);
      expect(chunk.buffer.detached).toBe(true);
    }
  });

  it('leaves alone what others may still read: pool slices, part views, shared memory, empty buffers', () => {
    const pooled = Buffer.from('a small buffer from the shared pool');
    const whole = Buffer.alloc(1024, 1);
    const part = whole.subarray(0, 512);
    const shared = new Uint8Array(new SharedArrayBuffer(1024));
    const empty = new Uint8Array(0);
    for (const b of [pooled, part, shared, empty]) releaseBuffer(b);
    expect(pooled.toString()).toBe('a small buffer from the shared pool');
    expect(whole.length).toBe(1024);
    expect(part.length).toBe(512);
    expect(shared.length).toBe(1024);
    // Released twice: the second call finds it released and does nothing.
    releaseBuffer(whole);
    releaseBuffer(whole);
    expect(whole.length).toBe(0);
  });
});
