/**
 * Streamed PUTs of the S3 store over a plain TCP socket of their own, for `http:` endpoints: the body's
 * chunks are copied into a small ring of fixed slots, each full slot goes to the socket with one
 * write, and a slot is refilled only once the kernel has taken it. Why: through undici, after the
 * SHA-256 the publish rules require, the largest costs of a PUT are the collector (the request
 * parser's fresh 64 KiB chunks, held by undici's stream layers until they are written, set off full
 * collections) and one socket write per 64 KiB chunk (docs/storage-and-content.md, "The S3 store").
 * Here a chunk is copied once into the ring and, when the body's producer allows it
 * (`releaseChunks`), its memory is freed at once (lib/release-buffer.ts; overlapped-writer.ts does the same for the directory store).
 *
 * The object comes into existence only when the server has the last byte, and the last slot is
 * written only after the body has ended cleanly (its final checks: length, digest), so a body that
 * fails them never completes an object. An empty body has no last byte: its head alone is the whole
 * request, so the body is read to its end before the connection is even opened. The connection is not reused (`connection: close`); the
 * answer is read whole (S3 PUT answers are a few headers and at most a small XML error).
 */
import net from 'node:net';
import { releaseBuffer } from '../../lib/release-buffer.ts';
import { StorageError } from '../errors.ts';
import { hasStableCode, upstreamError } from '../streaming/http-upstream.ts';
import { announceSocketRequest } from '../streaming/socket-request-channels.ts';
import { parseResponseHead, type ResponseHead } from './s3-socket-read.ts';

/** Bytes per ring slot: one socket write. */
export const SOCKET_WRITE_SLOT_BYTES = 512 * 1024;
/** Slots per upload: up to this many writes in the kernel's hands while the next slot fills. */
export const SOCKET_WRITE_SLOTS = 4;
/**
 * Bodies above this size are sent with `Expect: 100-continue`: the server checks the request (its
 * signature) before taking the body, so a refusal comes as an answer, not as a connection reset
 * racing the answer (a server closing with unread body bytes resets the connection). Smaller bodies
 * go at once (Go servers read and discard up to 256 KiB of an unread body before closing).
 */
export const EXPECT_CONTINUE_ABOVE_BYTES = 256 * 1024;
/** How long to wait for `100 Continue` before sending the body anyway (as curl does). */
const EXPECT_CONTINUE_WAIT_MS = 1000;
/** An answer longer than this is refused (S3 PUT answers are headers and at most a small XML error). */
const MAX_ANSWER_BYTES = 1024 * 1024;

export interface SocketWriteOptions {
  readonly host: string;
  readonly port: number;
  readonly connectTimeoutMs: number;
  /** Longest wait for the server to take bytes while we send, and for its answer after the last byte. */
  readonly timeoutMs: number;
}

export interface PutAnswer {
  readonly status: number;
  readonly headers: ReadonlyMap<string, string>;
  /** The answer's body as text (an XML error, or empty). */
  readonly text: string;
}

/** The body of a chunked answer, or undefined while it is incomplete. */
export function dechunk(bytes: Buffer): Buffer | undefined {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = bytes.indexOf('\r\n', at);
    if (lineEnd < 0) return undefined;
    const size = Number.parseInt(bytes.toString('latin1', at, lineEnd).split(';')[0]!.trim(), 16);
    if (!Number.isFinite(size)) throw new Error('a malformed chunk size');
    if (size === 0) return Buffer.concat(parts);
    if (bytes.length < lineEnd + 2 + size + 2) return undefined;
    parts.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

/** The whole answer once `bytes` holds it; undefined while more is to come (`closed`: nothing more will). */
export function completeAnswer(bytes: Buffer, what: string, closed: boolean): PutAnswer | undefined {
  let rest = bytes;
  let head: ResponseHead | undefined;
  // Interim answers (100 Continue) come before the real one.
  for (;;) {
    head = parseResponseHead(rest, what);
    if (!head) return undefined;
    if (head.status >= 200) break;
    rest = rest.subarray(head.headBytes);
  }
  const body = rest.subarray(head.headBytes);
  const answer = (text: Buffer) => ({ status: head.status, headers: head.headers, text: text.toString('utf8') });
  if (head.headers.get('transfer-encoding')?.toLowerCase().includes('chunked')) {
    const decoded = dechunk(body);
    if (decoded) return answer(decoded);
    return closed ? answer(body) : undefined;
  }
  const length = head.headers.get('content-length');
  if (length !== undefined && /^\d+$/.test(length)) {
    if (body.length >= Number(length)) return answer(body.subarray(0, Number(length)));
    return closed ? answer(body) : undefined;
  }
  return closed ? answer(body) : undefined;
}

/** Reads a body declared empty to its end (its checks run there); a byte in it is refused. */
export async function readEmptyBody(body: AsyncIterable<Buffer>): Promise<void> {
  for await (const chunk of body)
    if (chunk.length > 0)
      throw new StorageError('invalid_request', 'The body is longer than its Content-Length of 0 bytes.');
}

async function* noChunks(): AsyncGenerator<Buffer> {}

interface Slot {
  readonly bytes: Buffer;
  /** Settles once the socket has taken the slot's write (never rejects; failures go to `fail`). */
  busy: Promise<void> | undefined;
}

/**
 * Sends `PUT path` with `headers` (signed, Host and Content-Length included) and the `length` bytes
 * of `body`; resolves with the server's answer (the caller maps a failure status). Errors, in the
 * order they win: the caller's abort, a body failure with a stable code (a size or digest check,
 * a policy refusal), the connection's failure, no progress for `timeoutMs` (504 `upstream_timeout`).
 */
export async function putOverSocket(
  options: SocketWriteOptions,
  request: { readonly path: string; readonly headers: Readonly<Record<string, string>> },
  body: AsyncIterable<Buffer>,
  length: number,
  put: { readonly signal?: AbortSignal | undefined; readonly releaseChunks?: boolean | undefined },
): Promise<PutAnswer> {
  const what = `PUT ${request.path}`;
  const { signal } = put;
  signal?.throwIfAborted();
  if (length === 0) {
    // The head would complete the object before the body's checks (at its end) ran.
    await readEmptyBody(body);
    signal?.throwIfAborted();
  }
  let failure: Error | undefined;
  let received = Buffer.alloc(0);
  let answer: PutAnswer | undefined;
  /** Ends the current wait (`until`) early: the connection failed or the server answered. */
  let interrupt: (() => void) | undefined;
  /** Whether a wait for the server (not for the body's producer) is under way: the stall timer runs then. */
  let waitingForServer = false;
  let stallMessage = `no connection within ${options.connectTimeoutMs} ms`;

  const fail = (err: Error) => {
    failure ??= err;
    interrupt?.();
  };
  const socket = net.connect({ host: options.host, port: options.port, noDelay: true });
  socket.setTimeout(options.connectTimeoutMs);
  socket.once('connect', () => socket.setTimeout(waitingForServer ? options.timeoutMs : 0));
  socket.on('timeout', () =>
    socket.destroy(
      new StorageError('upstream_timeout', `The S3 server did not answer in time (${what}: ${stallMessage}).`),
    ),
  );
  socket.on('error', (err) => fail(upstreamError(err, what)));
  const settle = (closed: boolean) => {
    try {
      if (received.length > MAX_ANSWER_BYTES)
        throw new StorageError('upstream_unreachable', `The S3 server answered ${what} with over 1 MiB.`);
      answer ??= completeAnswer(received, what, closed);
    } catch (err) {
      socket.destroy(err as Error);
      return;
    }
    if (answer) {
      socket.destroy();
      interrupt?.();
    }
  };
  let continued = false;
  /** Ends the wait for `100 Continue` (mayContinue), and only that wait. */
  let onContinue: (() => void) | undefined;
  socket.on('data', (data: Buffer) => {
    received = Buffer.concat([received, data]);
    if (!continued && /^HTTP\/1\.[01] 100[ \r]/.test(received.toString('latin1', 0, 13))) {
      continued = true;
      onContinue?.();
    }
    settle(false);
  });
  socket.on('close', () => {
    if (!answer && received.length > 0) settle(true);
    if (!answer) fail(upstreamError(new Error('the connection closed before the answer'), what));
  });
  const onAbort = () => socket.destroy(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
  signal?.addEventListener('abort', onAbort, { once: true });

  /** `p`'s value, or undefined once the connection failed or the server answered. */
  const until = <T>(p: Promise<T>): Promise<T | undefined> => {
    if (failure || answer) {
      p.catch(() => {});
      return Promise.resolve(undefined);
    }
    return new Promise<T | undefined>((resolve, reject) => {
      interrupt = () => resolve(undefined);
      p.then(resolve, reject);
    }).finally(() => {
      interrupt = undefined;
    });
  };
  /**
   * Waits for the server with the stall timer armed (`message` says what it did not do). With
   * `whole`, `p` must also settle within the timeout however the server paces its bytes: the stall
   * timer only counts silence, and an answer trickled a byte at a time would hold the upload for as
   * long as the answer's cap lasts.
   */
  const fromServer = async (p: Promise<unknown>, message: string, whole = false) => {
    stallMessage = message;
    waitingForServer = true;
    if (!socket.connecting && !socket.destroyed) socket.setTimeout(options.timeoutMs);
    const deadline = whole
      ? setTimeout(
          () =>
            socket.destroy(
              new StorageError('upstream_timeout', `The S3 server did not answer in time (${what}: ${message}).`),
            ),
          options.timeoutMs,
        )
      : undefined;
    try {
      await until(p);
    } finally {
      clearTimeout(deadline);
      waitingForServer = false;
      if (!socket.connecting && !socket.destroyed) socket.setTimeout(0);
    }
  };
  /** Settles only through `interrupt`: the answer (or a failure) ends the wait for it. */
  const answered = new Promise<void>(() => {});

  const expectContinue = length > EXPECT_CONTINUE_ABOVE_BYTES;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const announced = announceSocketRequest('PUT', `http://${host}:${options.port}`, request.path, request.headers);
  const expect = expectContinue ? 'expect: 100-continue\r\n' : '';
  socket.write(`PUT ${request.path} HTTP/1.1\r\n${announced.headLines}${expect}connection: close\r\n\r\n`);
  let waitedForContinue = !expectContinue;

  const slotBytes = Math.max(1, Math.min(SOCKET_WRITE_SLOT_BYTES, length));
  const ring: Slot[] = Array.from({ length: Math.min(SOCKET_WRITE_SLOTS, Math.ceil(length / slotBytes) || 1) }, () => ({
    bytes: Buffer.allocUnsafe(slotBytes),
    busy: undefined,
  }));
  let index = 0;
  let fill = 0;
  let sent = 0;
  /** Before the first body byte: `100 Continue`, an answer, a failure, or a second without a word. */
  const mayContinue = async () => {
    if (waitedForContinue) return;
    waitedForContinue = true;
    if (continued) return;
    let timer: NodeJS.Timeout | undefined;
    await until(
      new Promise<void>((resolve) => {
        onContinue = resolve;
        timer = setTimeout(resolve, EXPECT_CONTINUE_WAIT_MS);
      }),
    );
    onContinue = undefined;
    clearTimeout(timer);
  };
  const send = (slot: Slot, n: number) => {
    sent += n;
    slot.busy = new Promise<void>((resolve) => {
      socket.write(n === slot.bytes.length ? slot.bytes : slot.bytes.subarray(0, n), (err) => {
        if (err) fail(upstreamError(err, what));
        resolve();
      });
    });
  };
  const tookNothing = `the server took no byte for ${options.timeoutMs} ms`;
  let bodyError: unknown;
  const chunks = (length === 0 ? noChunks() : body)[Symbol.asyncIterator]();
  let ended = false;
  /** Body bytes received so far. */
  let taken = 0;
  try {
    try {
      for (;;) {
        // A failed connection or an early answer (an error before the body was read) ends the body at once.
        const next = await until(chunks.next());
        if (next === undefined) break;
        if (next.done) {
          ended = true;
          break;
        }
        const chunk = next.value;
        taken += chunk.length;
        // Content-Length was sent with the head: bytes past it would be read as another request.
        if (taken > length)
          throw new StorageError('invalid_request', `The body is longer than its Content-Length of ${length} bytes.`);
        for (let at = 0; at < chunk.length && !failure && !answer; ) {
          if (fill === slotBytes) {
            await mayContinue();
            if (failure || answer) break;
            // The body goes on, so this full slot does not hold the last byte: send it.
            send(ring[index]!, fill);
            index = (index + 1) % ring.length;
            fill = 0;
            const slot = ring[index]!;
            if (slot.busy) await fromServer(slot.busy, tookNothing);
            slot.busy = undefined;
            continue;
          }
          const n = chunk.copy(ring[index]!.bytes, fill, at);
          fill += n;
          at += n;
        }
        if (put.releaseChunks) releaseBuffer(chunk);
        if (failure || answer) break;
      }
    } catch (err) {
      bodyError = err;
      throw err;
    } finally {
      if (!ended) void chunks.return?.(undefined)?.catch(() => {});
    }
    if (ended && taken !== length && !failure && !answer)
      throw new StorageError('invalid_request', `The body has ${taken} bytes but Content-Length said ${length}.`);
    if (ended && !failure && !answer) {
      // The body ended cleanly (its final checks passed): only now does the last slot go.
      if (fill > 0) await mayContinue();
      if (fill > 0 && !failure && !answer) send(ring[index]!, fill);
      await fromServer(Promise.all(ring.map((s) => s.busy)), tookNothing);
      if (!answer && !failure)
        await fromServer(answered, `no answer within ${options.timeoutMs} ms of the last byte`, true);
    }
    if (answer) {
      // A success before the server had every byte, or before the body ended (and so passed its
      // checks), is never taken as stored: the object may not be the body's.
      if (answer.status >= 200 && answer.status < 300 && (!ended || sent !== length))
        throw new StorageError(
          'upstream_unreachable',
          `The S3 server answered ${what} with ${answer.status} before it had the whole body.`,
        );
      return answer;
    }
    throw failure ?? upstreamError(new Error('the connection ended without an answer'), what);
  } catch (err) {
    announced.failed(err);
    if (signal?.aborted && !hasStableCode(bodyError)) throw signal.reason;
    if (hasStableCode(bodyError)) throw bodyError;
    throw err;
  } finally {
    if (answer) {
      announced.answered(answer.status);
      announced.finished();
    }
    signal?.removeEventListener('abort', onAbort);
    socket.destroy();
  }
}
