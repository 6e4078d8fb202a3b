/**
 * A malformed request is a stream error (RFC 9113 §8.1.1: RST_STREAM PROTOCOL_ERROR on its own
 * stream), and nghttp2 answers DATA past a request's `content-length` so. node:http2 however hears
 * every protocol error nghttp2 reports (NGHTTP2_ERR_PROTO) as its session's, and destroys the
 * session for it: GOAWAY INTERNAL_ERROR, and every other stream of the connection cut (a download,
 * another upload), so one client's bad upload ended all that its connection carried (a router's or
 * a browser's connection carries many).
 *
 * `StreamErrors` holds such a destroy back until the read that reported it is done (`setImmediate`),
 * then lets it go on unless every error reported there was a stream's: each error nghttp2 made a
 * stream error of closes a stream with PROTOCOL_ERROR in that read, a connection error closes none
 * (nghttp2 sent GOAWAY PROTOCOL_ERROR itself, and node:http2 reports it twice). So a connection
 * error still ends the session as before, and a malformed request is reset alone. What bounds a
 * client that sends malformed request after malformed request is unchanged: nghttp2 counts each as
 * an invalid frame (`maxSessionInvalidFrames`: then the session ends), and the front door counts
 * each reset toward the client's reset budget.
 */
import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';

const { NGHTTP2_PROTOCOL_ERROR } = http2.constants;
/** nghttp2's NGHTTP2_ERR_PROTO, as node:http2 reports it (`NghttpError.errno`). */
const NGHTTP2_ERR_PROTO = -505;

interface Pending {
  readonly error: Error;
  errors: number;
  resets: number;
}

export class StreamErrors {
  #pending: Pending | undefined;

  /** Installs itself on `session`; `kept(n)` hears how many stream errors a read had when the session was kept. */
  constructor(session: Http2Session, kept: (resets: number) => void) {
    const destroy = session.destroy.bind(session);
    session.destroy = (error?: Error, code?: number): void => {
      if (!isProtocolError(error)) {
        destroy(error, code);
        return;
      }
      if (this.#pending !== undefined) {
        this.#pending.errors++;
        return;
      }
      const pending: Pending = { error, errors: 1, resets: 0 };
      this.#pending = pending;
      // After the read: nghttp2 sends the streams' RST_STREAM at its end, and their close follows.
      setImmediate(() => {
        this.#pending = undefined;
        if (session.destroyed) return;
        if (pending.resets >= pending.errors) kept(pending.resets);
        else destroy(pending.error);
      });
    };
  }

  /** A stream closed: true when it is the reset of a stream error held back (nghttp2's PROTOCOL_ERROR). */
  closed(stream: ServerHttp2Stream): boolean {
    if (this.#pending === undefined || stream.rstCode !== NGHTTP2_PROTOCOL_ERROR) return false;
    this.#pending.resets++;
    return true;
  }
}

function isProtocolError(error: unknown): error is Error {
  const e = error as (Error & { code?: unknown; errno?: unknown }) | undefined;
  return e instanceof Error && e.code === 'ERR_HTTP2_ERROR' && e.errno === NGHTTP2_ERR_PROTO;
}
