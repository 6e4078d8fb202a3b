/**
 * One upload's claim on its storage quotas (docs/storage-quotas.md, "Bytes already held"). The body
 * is read against a reservation of its bytes, pinned to its declared digest when it has one (then
 * nothing is reserved for a quota that already counts that blob). When the reservation is refused
 * but the body may still be the blob its name holds (an idempotent retry: its declared size, and
 * digest if declared; chunked, no more bytes so far), it is read on probation: it holds no room, is
 * cut with the refusal past that size, and once staged and hashed is answered unchanged if it is
 * that blob, or else admitted only if a reservation pinned to its real digest fits, before it is
 * committed. So new bytes are never published past a quota, a refused body is discarded whole, and
 * a body for another name is refused before it is read unless its digest is declared. An upload that
 * met no quota before its body is decided the same way before it is committed: a quota set while it
 * ran holds it too.
 */
import type { QuotaReservation, StorageQuotas } from './storage-quotas.ts';

export interface UploadQuotaRequest {
  readonly repository: string;
  readonly principalId: string | null;
  /** Content-Length; undefined for a chunked body. */
  readonly declaredBytes: number | undefined;
  /** Content-Digest's sha-256 (lowercase hex). */
  readonly declaredSha256: string | undefined;
  /** The blob the upload's name holds now: the same bytes again are answered unchanged and cost nothing. */
  current(): Promise<{ readonly sha256: string; readonly sizeBytes: number } | undefined>;
}

/** The staged bytes, as the store verified them. */
export interface StagedBytes {
  readonly sha256: string;
  readonly sizeBytes: number;
}

interface Probation {
  /** The refusal to answer if the bytes turn out not to be counted already. */
  readonly refusal: unknown;
  /** The most bytes it may read. */
  readonly boundBytes: number;
}

function isQuotaExceeded(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'quota_exceeded';
}

export class UploadQuota {
  readonly #quotas: StorageQuotas;
  readonly #request: UploadQuotaRequest;
  #reservation: QuotaReservation | undefined;
  #probation: Probation | undefined;

  private constructor(
    quotas: StorageQuotas,
    request: UploadQuotaRequest,
    reservation: QuotaReservation | undefined,
    probation: Probation | undefined,
  ) {
    this.#quotas = quotas;
    this.#request = request;
    this.#reservation = reservation;
    this.#probation = probation;
  }

  /**
   * Reserves before the body is read (nothing when no quota applies yet). Rejects with
   * `quota_exceeded` when the bytes cannot fit and cannot be the blob the name holds either.
   */
  static async open(quotas: StorageQuotas, request: UploadQuotaRequest): Promise<UploadQuota> {
    const { repository, principalId, declaredBytes, declaredSha256 } = request;
    try {
      const reservation = await quotas.reserve({
        repository,
        principalId,
        bytes: declaredBytes ?? 0,
        sha256: declaredSha256,
      });
      return new UploadQuota(quotas, request, reservation, undefined);
    } catch (err) {
      if (!isQuotaExceeded(err)) throw err;
      const boundBytes = await sameNameBound(request, declaredBytes);
      if (boundBytes === undefined) throw err;
      return new UploadQuota(quotas, request, undefined, { refusal: err, boundBytes });
    }
  }

  /** Whether a chunked body must be counted as it arrives (`meter`): a quota applied when it began. */
  get metering(): boolean {
    return this.#reservation !== undefined || this.#probation !== undefined;
  }

  /**
   * A chunked body, counted as it arrives: the reservation grows, and where it cannot, the body goes
   * on probation while it may still be the blob its name holds, or fails with `quota_exceeded`.
   */
  async *meter(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
    let receivedBytes = 0;
    for await (const chunk of body) {
      receivedBytes += chunk.byteLength;
      if (this.#probation) {
        if (receivedBytes > this.#probation.boundBytes) throw this.#probation.refusal;
      } else if (this.#reservation && receivedBytes > this.#reservation.bytes) {
        try {
          await this.#reservation.ensure(receivedBytes);
        } catch (err) {
          if (!isQuotaExceeded(err)) throw err;
          const boundBytes = await sameNameBound(this.#request, undefined);
          if (boundBytes === undefined || receivedBytes > boundBytes) throw err;
          this.#probation = { refusal: err, boundBytes };
        }
      }
      yield chunk;
    }
  }

  /**
   * Once the bytes are staged and known, before they are committed: the reservation the catalog
   * insert settles. On probation (the name no longer holds them), holding nothing because no quota
   * applied when the upload began (one may have been set since), or holding a reservation that was
   * lost, a reservation pinned to their digest is taken now, and rejects with `quota_exceeded` when
   * they are not counted and do not fit.
   */
  async admit(staged: StagedBytes): Promise<string | undefined> {
    const pinned = {
      repository: this.#request.repository,
      principalId: this.#request.principalId,
      bytes: staged.sizeBytes,
      sha256: staged.sha256,
    };
    if (this.#probation || !this.#reservation) {
      await this.#reservation?.release();
      this.#reservation = await this.#quotas.reserve(pinned);
      this.#probation = undefined;
    } else if (!(await this.#quotas.holds(this.#reservation.id, staged.sizeBytes))) {
      // Lost while the body ran (renewals failing past its time to live, then deleted by another
      // reservation): its room may be taken, so the bytes are decided again.
      await this.#quotas.reserveAs(this.#reservation.id, pinned);
    }
    return this.#reservation?.id;
  }

  /** Gives the reservation back (a no-op once publish settled it). */
  async release(): Promise<void> {
    await this.#reservation?.release();
  }
}

/**
 * The most bytes a body may send on probation: the size of the blob its name holds, when that is its
 * declared size and digest (then the same bytes are answered unchanged); undefined otherwise.
 */
async function sameNameBound(request: UploadQuotaRequest, sizeBytes: number | undefined): Promise<number | undefined> {
  const current = await request.current();
  if (!current) return undefined;
  if (request.declaredSha256 !== undefined && current.sha256 !== request.declaredSha256) return undefined;
  if (sizeBytes !== undefined && current.sizeBytes !== sizeBytes) return undefined;
  return current.sizeBytes;
}
