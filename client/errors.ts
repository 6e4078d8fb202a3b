/**
 * Errors of the Arkvory client. `code` is the gateway's stable code when the gateway refused
 * (`unauthorized`, `not_found`, `conflict`, `rate_limited`, …) or one of the client's own:
 * match on `code`, never on the message.
 */
export const CLIENT_ERRORS = {
  /** No byte arrived through any mirror for too many attempts in a row. */
  gave_up: 'The transfer made no progress through any gateway; giving up.',
  /** The whole file does not hash to the digest the gateway published. */
  digest_mismatch: 'The downloaded bytes do not match the digest the gateway published.',
  /** The gateway answered something this client cannot use (no ETag to resume on, a wrong Content-Range). */
  protocol: 'The gateway answered in a way the client cannot use.',
  /** The multipart completion job failed on the gateway. */
  upload_failed: 'The gateway could not complete the upload.',
  /** An AbortSignal ended the transfer. */
  aborted: 'The transfer was aborted.',
  /** Another download to the same output runs (its `<output>.partial.lock` is held). */
  target_locked: 'Another download to this file is running.',
  /** A directory is where the download writes a file (the output, or its `.partial`, `.partial.json` or `.partial.lock`). */
  output_is_directory: 'A directory is where the download writes a file.',
  /** The disk (or the quota) holding the output (or `upload`'s state) is full; the bytes written so far are kept for a resume. */
  no_space: 'No space left to write the file; the bytes written so far are kept.',
  /** Bad arguments: no URL, a target path that names nothing, a key no HTTP header can carry, an upload state directory not of this user's own (never retried). */
  invalid_argument: 'Invalid argument.',
} as const;

export type ClientErrorCode = keyof typeof CLIENT_ERRORS;

export class ArkvoryClientError extends Error {
  override readonly name = 'ArkvoryClientError';
  /** A client code, or the gateway's stable code (from its JSON error body). */
  readonly code: ClientErrorCode | (string & {});
  /** The HTTP status when the gateway answered; undefined for client-side failures. */
  readonly status: number | undefined;
  constructor(code: ClientErrorCode | (string & {}), message?: string, options?: { status?: number; cause?: unknown }) {
    super(
      message ?? (CLIENT_ERRORS as Record<string, string>)[code] ?? code,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.code = code;
    this.status = options?.status;
  }
}

/**
 * A request undici refuses to build (a header value HTTP cannot carry: a key pasted with a control
 * or non-ASCII character), as `invalid_argument`; undefined for any other error. No gateway can
 * change it, so it is never retried as a failed gateway would be. Its message names the header,
 * never its value.
 */
export function unsendable(err: unknown): ArkvoryClientError | undefined {
  if ((err as { code?: unknown } | null)?.code !== 'UND_ERR_INVALID_ARG') return undefined;
  return new ArkvoryClientError('invalid_argument', `The request cannot be sent: ${(err as Error).message}.`, {
    cause: err,
  });
}

/** The error a gateway's JSON error body describes (`{ code, message }`), or a generic `http_<status>`. */
export function gatewayError(status: number, body: string): ArkvoryClientError {
  try {
    const parsed = JSON.parse(body) as { code?: unknown; message?: unknown };
    if (typeof parsed.code === 'string')
      return new ArkvoryClientError(parsed.code, typeof parsed.message === 'string' ? parsed.message : parsed.code, {
        status,
      });
  } catch {
    // not JSON: a proxy in between answered
  }
  return new ArkvoryClientError(`http_${status}`, `The server answered ${status}.`, { status });
}
