import { afterEach, describe, expect, it, vi } from 'vitest';
import { StorageError } from '../errors.ts';
import { headLength, parseContentRange, sendStreamedBody, unexpectedStatus, upstreamError } from './http-upstream.ts';

const withCode = (code: string) => Object.assign(new Error(code), { code });

describe('upstreamError: undici and socket codes to storage codes', () => {
  it.each([
    ['UND_ERR_CONNECT_TIMEOUT', 'upstream_timeout'],
    ['UND_ERR_HEADERS_TIMEOUT', 'upstream_timeout'],
    ['UND_ERR_BODY_TIMEOUT', 'upstream_timeout'],
    ['ETIMEDOUT', 'upstream_timeout'],
    ['ECONNREFUSED', 'upstream_unreachable'],
    ['ECONNRESET', 'upstream_unreachable'],
    ['UND_ERR_SOCKET', 'upstream_unreachable'],
    ['ENOTFOUND', 'upstream_unreachable'],
    ['UND_ERR_ABORTED', 'upstream_unreachable'],
  ])('%s → %s, keeping the cause', (code, expected) => {
    const cause = withCode(code);
    const err = upstreamError(cause, 'GET /x');
    expect(err).toMatchObject({ code: expected, cause });
    expect(err.message).toContain('GET /x');
  });

  it('a StorageError (a failed body check, our own timeout) passes through unchanged', () => {
    const own = new StorageError('payload_too_large');
    expect(upstreamError(own, 'PUT /x')).toBe(own);
  });

  it('statuses: 507 is storage_full, anything else unexpected is upstream_unreachable naming the status', () => {
    expect(unexpectedStatus(507, 'PUT /x').code).toBe('storage_full');
    expect(unexpectedStatus(500, 'PUT /x')).toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('500'),
    });
    expect(unexpectedStatus(403, 'MOVE /x').code).toBe('upstream_unreachable');
  });
});

describe('parseContentRange', () => {
  it.each([
    ['bytes 0-99/1000', { start: 0, end: 99, size: 1000 }],
    ['bytes 5-5/6', { start: 5, end: 5, size: 6 }],
    ['bytes */1000', undefined],
    ['bytes 0-99/*', undefined],
    ['items 0-1/2', undefined],
    [undefined, undefined],
  ])('%s', (value, expected) => {
    expect(parseContentRange(value)).toEqual(expected);
  });
});

describe('sendStreamedBody: a store that takes no more of the body', () => {
  afterEach(() => {
    vi.useRealTimers();
  });
  const KiB = 1024;
  const options = { timeoutMs: 1000, timeoutMessage: 'no answer' };
  async function* oneLargeChunk(): AsyncGenerator<Buffer> {
    yield Buffer.alloc(1024 * KiB);
  }
  /** A store taking 64 KiB per 300 ms of the fake clock: slow, never silent for the timeout. */
  const slowStore = async (body: AsyncGenerator<Buffer>, signal: AbortSignal) => {
    for await (const piece of body) {
      for (let taken = 0; taken < piece.length; taken += 64 * KiB) {
        await vi.advanceTimersByTimeAsync(300);
        signal.throwIfAborted();
      }
    }
  };

  it('is not a slow one: a large chunk goes in pieces, each asked for once the one before was taken', async () => {
    vi.useFakeTimers();
    await expect(sendStreamedBody(oneLargeChunk(), options, slowStore)).resolves.toBeUndefined();
  });

  it('that stops taking it for the timeout fails upstream_timeout', async () => {
    vi.useFakeTimers();
    const stopped = async (body: AsyncGenerator<Buffer>, signal: AbortSignal) => {
      await body.next();
      await vi.advanceTimersByTimeAsync(options.timeoutMs);
      signal.throwIfAborted();
    };
    await expect(sendStreamedBody(oneLargeChunk(), options, stopped)).rejects.toMatchObject({
      code: 'upstream_timeout',
    });
  });
});

describe('headLength: the object size of a HEAD answer', () => {
  it('is a plain non-negative integer Content-Length', () => {
    expect(headLength('0', 'HEAD /x')).toBe(0);
    expect(headLength('1048576', 'HEAD /x')).toBe(1048576);
  });

  it.each([[undefined], [''], ['-1'], ['1e3'], [' 12'], ['12, 12'], ['99999999999999999']])(
    '%j is 502 upstream_unreachable, never a size',
    (value) => {
      const err = (() => {
        try {
          headLength(value, 'HEAD /x');
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(StorageError);
      expect((err as StorageError).code).toBe('upstream_unreachable');
    },
  );
});
