/**
 * The HTTP verbs the static-HTTP store speaks to its file server (nginx with WebDAV PUT/DELETE/MOVE, or
 * any server with GET/HEAD/PUT/DELETE): every call mapped to a StorageError on failure, PUT with the
 * confirmation deadline of `sendStreamedBody`, MOVE with a GET+PUT+DELETE fallback learned once.
 */
import { Readable } from 'node:stream';
import type { Dispatcher, Pool } from 'undici';
import { StorageError } from '../errors.ts';
import { drainBody } from '../streaming/bounded-body.ts';
import { type ExpectedBlob, verifiedCopy } from '../streaming/verified-copy.ts';
import {
  createUpstreamPool,
  sendStreamedBody,
  unexpectedStatus,
  upstreamError,
  type UpstreamOptions,
} from '../streaming/http-upstream.ts';

export interface CallOptions {
  method: Dispatcher.HttpMethod;
  path: string;
  headers?: Record<string, string>;
  body?: Readable;
  signal?: AbortSignal;
  headersTimeout?: number;
  highWaterMark?: number;
}

export class WebDavClient {
  /** The store's base URL, ending in `/`. */
  readonly location: string;
  readonly #basePath: string;
  readonly #upstream: Pool;
  readonly #timeoutMs: number;
  /** Learned from the first MOVE: undefined until then. */
  #hasMove: boolean | undefined;

  constructor(url: string, options: UpstreamOptions) {
    const base = new URL(url);
    if (!base.pathname.endsWith('/')) base.pathname += '/';
    this.location = base.href;
    this.#basePath = base.pathname;
    this.#upstream = createUpstreamPool(base.origin, options);
    this.#timeoutMs = options.timeoutMs;
  }

  /** `ARKVORY_STORAGE_TIMEOUT_SECONDS` in ms: also the longest a body read whole may take. */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** The request path of an object, each segment percent-encoded. */
  pathOf(relative: string): string {
    return this.#basePath + relative.split('/').map(encodeURIComponent).join('/');
  }

  /**
   * MKCOL of the base path's collections, outermost first, whatever each answers (405: there; a
   * path above the server's WebDAV location: refused): a MKCOL below a base no PUT has created yet
   * (a PUT creates its parents, `create_full_put_path`) finds no parent (409).
   */
  async makeBaseCollections(): Promise<void> {
    const segments = this.#basePath.split('/').filter(Boolean);
    for (let i = 1; i <= segments.length; i++)
      await this.status({ method: 'MKCOL', path: `/${segments.slice(0, i).join('/')}/` });
  }

  close(): Promise<void> {
    return this.#upstream.close();
  }

  async call(o: CallOptions): Promise<Dispatcher.ResponseData> {
    try {
      return await this.#upstream.request({
        method: o.method,
        path: o.path,
        headers: o.headers,
        body: o.body,
        signal: o.signal,
        headersTimeout: o.headersTimeout,
        highWaterMark: o.highWaterMark,
      });
    } catch (err) {
      throw upstreamError(
        o.signal?.aborted && o.signal.reason instanceof StorageError ? o.signal.reason : err,
        `${o.method} ${o.path}`,
      );
    }
  }

  /** A request whose answer has no body we need: the status, body drained. */
  async status(o: CallOptions): Promise<number> {
    const res = await this.call(o);
    await drainBody(res.body, this.#timeoutMs);
    return res.statusCode;
  }

  async expectStatus(o: CallOptions, ok: readonly number[]): Promise<number> {
    const code = await this.status(o);
    if (!ok.includes(code)) throw unexpectedStatus(code, `${o.method} ${o.path}`);
    return code;
  }

  /** PUT with a streamed body and the confirmation deadline of `sendStreamedBody`. */
  async put(relative: string, body: AsyncIterable<Buffer>, signal?: AbortSignal): Promise<void> {
    const path = this.pathOf(relative);
    const timeoutMessage = `The artifact store did not confirm PUT ${path} within ${this.#timeoutMs} ms.`;
    await sendStreamedBody(body, { signal, timeoutMs: this.#timeoutMs, timeoutMessage }, (watched, sendSignal) =>
      this.expectStatus(
        {
          method: 'PUT',
          path,
          headers: { 'content-type': 'application/octet-stream' },
          body: Readable.from(watched, { objectMode: false }),
          signal: sendSignal,
          headersTimeout: 0,
        },
        [200, 201, 204],
      ),
    );
  }

  async *get(relative: string, signal?: AbortSignal): AsyncGenerator<Buffer> {
    const path = this.pathOf(relative);
    const res = await this.call({ method: 'GET', path, signal });
    if (res.statusCode === 404) {
      await drainBody(res.body, this.#timeoutMs);
      throw new StorageError('not_found', `${relative} is not on the artifact store.`);
    }
    if (res.statusCode !== 200) {
      await drainBody(res.body, this.#timeoutMs);
      throw unexpectedStatus(res.statusCode, `GET ${path}`);
    }
    try {
      for await (const chunk of res.body) yield chunk as Buffer;
    } catch (err) {
      throw upstreamError(err, `GET ${path}`);
    }
  }

  /** Removes an object; a collection (nginx answers 409 without the slash) with `Depth: infinity`. */
  async remove(relative: string): Promise<void> {
    const path = this.pathOf(relative);
    const code = await this.expectStatus({ method: 'DELETE', path }, [200, 204, 404, 409]);
    if (code === 409)
      await this.expectStatus({ method: 'DELETE', path: `${path}/`, headers: { depth: 'infinity' } }, [200, 204, 404]);
  }

  /**
   * MOVE, or GET+PUT+DELETE on a store without it. Returns false when `to` existed and `overwrite` is off.
   * With `expected` (a blob's publish; scrub's quarantine, with the bytes it read), the fallback's copy is checked as it passes: bytes of another
   * size or digest (a GET cut short, a proxy rewriting it) fail the PUT before its body ends, so the
   * store keeps nothing new under `to`, and `from` stays for the caller to discard. A MOVE needs no
   * check: the store renames the very object written and verified.
   */
  async move(from: string, to: string, overwrite: boolean, expected?: ExpectedBlob): Promise<boolean> {
    if (this.#hasMove !== false) {
      const code = await this.status({
        method: 'MOVE',
        path: this.pathOf(from),
        headers: { destination: this.pathOf(to), overwrite: overwrite ? 'T' : 'F' },
      });
      if (code === 201 || code === 204) {
        this.#hasMove = true;
        return true;
      }
      if (code === 412) return false;
      if (code === 404) throw new StorageError('not_found', `${from} is not on the artifact store.`);
      if (code !== 405 && code !== 501) throw unexpectedStatus(code, `MOVE ${this.pathOf(from)}`);
      this.#hasMove = false;
    }
    if (!overwrite && (await this.status({ method: 'HEAD', path: this.pathOf(to) })) === 200) return false;
    const copied = this.get(from);
    await this.put(to, expected ? verifiedCopy(copied, expected, `GET ${this.pathOf(from)}`) : copied);
    await this.remove(from);
    return true;
  }
}
