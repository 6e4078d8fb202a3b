/**
 * Pure decisions of the resuming client: what a gateway's answer means for the transfer (keep the
 * body, start over, wait, move to another gateway, or fail) and how long `Retry-After` asks to wait.
 * No I/O and no clock: callers pass `nowMs`.
 */

export type Headers = Readonly<Record<string, string | string[] | undefined>>;

export type Decision =
  /** Write the body at `offset` (0 when the gateway sent the whole representation again). */
  | {
      readonly kind: 'body';
      readonly offset: number;
      /**
       * Where the body must end: the byte after the last its Content-Range (206) or Content-Length
       * (200) gives; undefined when neither says. A body sent past it (chunked, so no length stops
       * it) is not the range the headers describe.
       */
      readonly end: number | undefined;
      readonly total: number;
      readonly etag: string | undefined;
      readonly digestHex: string | undefined;
    }
  /** Nothing left to fetch: the range starts at the end. */
  | { readonly kind: 'complete' }
  /** What we hold cannot be part of the representation (416 before its end, a 206 of another one): drop it and start over. */
  | { readonly kind: 'restart' }
  /** The same gateway asked us to come back later (429). */
  | { readonly kind: 'wait'; readonly ms: number }
  /** This gateway cannot serve now (fenced, a dependency down, a proxy error): try the next one. */
  | { readonly kind: 'failover' }
  /** A refusal retrying cannot change (401, 403, 404, …): the caller reads the error body. */
  | { readonly kind: 'fail' }
  /** A 206 that is not the range asked for: its body is not read (it may be any size), and the transfer fails. */
  | { readonly kind: 'protocol'; readonly reason: string };

function one(headers: Headers, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A strong ETag usable in If-Range, else undefined (weak validators cannot guard a resume). */
export function strongEtag(headers: Headers): string | undefined {
  const etag = one(headers, 'etag');
  return etag && /^"[^"]*"$/.test(etag) ? etag : undefined;
}

/** The sha-256 the gateway publishes: `Repr-Digest: sha-256=:<base64>:`, else an ETag that is a sha256. */
export function publishedSha256(headers: Headers): string | undefined {
  const repr = /sha-256=:([A-Za-z0-9+/]{43}=):/.exec(one(headers, 'repr-digest') ?? '');
  if (repr) return Buffer.from(repr[1]!, 'base64').toString('hex');
  const etag = /^"([0-9a-f]{64})"$/.exec(one(headers, 'etag') ?? '');
  return etag?.[1];
}

/** Milliseconds `Retry-After` asks for (delta-seconds or an HTTP date), within [0, capMs]; `fallbackMs` when absent. */
export function retryAfterMs(headers: Headers, nowMs: number, fallbackMs: number, capMs: number): number {
  const raw = one(headers, 'retry-after')?.trim();
  let ms = fallbackMs;
  if (raw && /^[0-9]+$/.test(raw)) ms = Number(raw) * 1000;
  else if (raw && !Number.isNaN(Date.parse(raw))) ms = Date.parse(raw) - nowMs;
  return Math.min(Math.max(ms, 0), capMs);
}

/** The representation the bytes held belong to: its strong ETag (sent as If-Range) and length (-1: unknown). */
export interface HeldRepresentation {
  readonly etag: string;
  readonly total: number;
}

/**
 * What to do with an answer to `GET` sent at `offset` (with `Range: bytes=offset-` and `If-Range`
 * when bytes of `held` are kept). A 200 to a ranged request means the representation changed
 * (If-Range failed) or the server ignores ranges: start over from 0. A server or mirror that
 * ignores If-Range answers for whatever it holds now, so a 206 of another ETag, or a 416 saying
 * the object ends at `offset` when `held` is longer or that carries another ETag, cannot continue (or
 * end) the bytes held: start over. A 206 of the same representation whose Content-Range is not the
 * range asked (another start, past its length, another length, longer than its body) is `protocol`.
 */
export function decide(status: number, headers: Headers, offset: number, held?: HeldRepresentation): Decision {
  if (status === 200) {
    const total = Number(one(headers, 'content-length'));
    return {
      kind: 'body',
      offset: 0,
      end: Number.isSafeInteger(total) ? total : undefined,
      total: Number.isSafeInteger(total) ? total : -1,
      etag: strongEtag(headers),
      digestHex: publishedSha256(headers),
    };
  }
  if (status === 206) {
    const text = one(headers, 'content-range') ?? '';
    const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(text);
    const [start, end, total] = range ? [Number(range[1]), Number(range[2]), Number(range[3])] : [];
    const etag = strongEtag(headers);
    // Its ETag first: a 206 of another representation is a restart, whatever range it says it holds.
    if (range && held && etag !== held.etag) return { kind: 'restart' };
    const length = one(headers, 'content-length');
    const wrong =
      !range || !Number.isSafeInteger(total)
        ? 'is not one range of a known length'
        : start !== offset
          ? `does not start at byte ${offset}, which was asked for`
          : end! < start! || end! >= total!
            ? 'is not within the length it gives'
            : held && held.total >= 0 && total !== held.total
              ? `gives another length than ${held.total} for the same ETag`
              : length !== undefined && Number(length) !== end! - start! + 1
                ? 'is not as long as its Content-Length'
                : undefined;
    if (wrong)
      return { kind: 'protocol', reason: `The 206's Content-Range (${text.slice(0, 80) || 'none'}) ${wrong}.` };
    return {
      kind: 'body',
      offset,
      end: end! + 1,
      total: total!,
      etag,
      digestHex: publishedSha256(headers),
    };
  }
  if (status === 416) {
    const total = /^bytes \*\/(\d+)$/.exec(one(headers, 'content-range') ?? '');
    const ends = total !== null && Number(total[1]) === offset;
    // A 416 of another ETag is about another representation, however long (the gateway sends its ETag).
    const etag = strongEtag(headers);
    const same = !held || etag === undefined || etag === held.etag;
    return ends && same && (!held || held.total < 0 || held.total === offset)
      ? { kind: 'complete' }
      : { kind: 'restart' };
  }
  if (status === 429) return { kind: 'wait', ms: 0 };
  if (status === 502 || status === 503 || status === 504) return { kind: 'failover' };
  return { kind: 'fail' };
}

/** Backoff before trying again after `failures` consecutive attempts without progress: 250 ms doubling to 5 s. */
export function backoffMs(failures: number): number {
  return Math.min(250 * 2 ** Math.max(failures - 1, 0), 5000);
}

/** The same path and query on another gateway, when `mirror` is an origin; a full mirror URL as it is. */
export function mirrorUrl(primary: string, mirror: string): string {
  const m = new URL(mirror);
  if (m.pathname !== '/' || m.search !== '') return mirror;
  const p = new URL(primary);
  return `${m.origin}${p.pathname}${p.search}`;
}
