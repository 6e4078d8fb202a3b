import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import { setImmediate as afterRead } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { StreamErrors } from './http2-stream-errors.ts';

const { NGHTTP2_PROTOCOL_ERROR, NGHTTP2_CANCEL } = http2.constants;

/** What node:http2 passes its session's destroy for a protocol error nghttp2 reported (an `NghttpError`). */
const protocolError = () => Object.assign(new Error('Protocol error'), { code: 'ERR_HTTP2_ERROR', errno: -505 });

/** The part of a session `StreamErrors` uses: its `destroy`, recorded. */
function session() {
  const destroyed: Array<[unknown, unknown]> = [];
  const s = {
    destroyed: false,
    destroy(error?: unknown, code?: unknown) {
      destroyed.push([error, code]);
      s.destroyed = true;
    },
  };
  const kept: number[] = [];
  const errors = new StreamErrors(s as unknown as Http2Session, (n) => kept.push(n));
  return { s: s as unknown as Http2Session, errors, destroyed, kept };
}

const closedWith = (rstCode: number) => ({ rstCode }) as ServerHttp2Stream;

describe('StreamErrors: a stream error nghttp2 reset is not its session’s end', () => {
  it('one protocol error and one stream reset with PROTOCOL_ERROR in the read: the session is kept', async () => {
    const { s, errors, destroyed, kept } = session();
    s.destroy(protocolError());
    expect(destroyed).toEqual([]);
    expect(errors.closed(closedWith(NGHTTP2_PROTOCOL_ERROR))).toBe(true);
    await afterRead();
    expect(destroyed).toEqual([]);
    expect(kept).toEqual([1]);
  });

  it('several in one read, each with its reset: kept', async () => {
    const { s, errors, destroyed, kept } = session();
    for (let i = 0; i < 3; i++) s.destroy(protocolError());
    for (let i = 0; i < 3; i++) errors.closed(closedWith(NGHTTP2_PROTOCOL_ERROR));
    await afterRead();
    expect(destroyed).toEqual([]);
    expect(kept).toEqual([3]);
  });

  it('a connection error (reported, no stream reset) still destroys the session, with its error', async () => {
    const { s, destroyed, kept } = session();
    const error = protocolError();
    s.destroy(error);
    s.destroy(protocolError());
    await afterRead();
    expect(destroyed).toEqual([[error, undefined]]);
    expect(kept).toEqual([]);
  });

  it('more errors than resets in the read: destroyed (a connection error beside a stream error)', async () => {
    const { s, errors, destroyed } = session();
    s.destroy(protocolError());
    s.destroy(protocolError());
    errors.closed(closedWith(NGHTTP2_PROTOCOL_ERROR));
    await afterRead();
    expect(destroyed).toHaveLength(1);
  });

  it('other resets are not the error’s; any other destroy goes through at once', async () => {
    const { s, errors, destroyed } = session();
    expect(errors.closed(closedWith(NGHTTP2_PROTOCOL_ERROR))).toBe(false);
    s.destroy(protocolError());
    expect(errors.closed(closedWith(NGHTTP2_CANCEL))).toBe(false);
    await afterRead();
    expect(destroyed).toHaveLength(1);
    const other = session();
    const tooMany = Object.assign(new Error('Too many invalid HTTP/2 frames'), {
      code: 'ERR_HTTP2_TOO_MANY_INVALID_FRAMES',
      errno: -902,
    });
    other.s.destroy(tooMany);
    other.s.destroy();
    expect(other.destroyed).toEqual([
      [tooMany, undefined],
      [undefined, undefined],
    ]);
  });
});
