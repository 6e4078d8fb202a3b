/**
 * Pure: whether an upload's body carries a coding. The gateway publishes the bytes it receives, so a
 * coded body (gzip, br…) would be published as its coded bytes and served without the coding, as
 * other bytes than the representation sent. A content coding is refused with 415 (RFC 9110
 * §15.5.16, with `Accept-Encoding: identity` as RFC 7694 asks; `identity` is no coding); a transfer
 * coding other than `chunked`, which Node's parser leaves in the body, with 400 (RFC 9112 §6.1 says
 * 501, but the fault is the client's and never answered as ours).
 */
import { GatewayError } from '../server/errors.ts';

/** The codings a header lists, lowercase, empty members dropped. */
function members(header: string | string[] | undefined): string[] {
  if (header === undefined) return [];
  return (Array.isArray(header) ? header.join(',') : header)
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '');
}

export function hasContentCoding(header: string | string[] | undefined): boolean {
  return members(header).some((c) => c !== 'identity');
}

/** Throws 415 `unsupported_content_encoding` for a body with a content coding. */
export function refuseContentCoding(header: string | string[] | undefined): void {
  if (hasContentCoding(header))
    throw new GatewayError('unsupported_content_encoding', undefined, { headers: { 'accept-encoding': 'identity' } });
}

/** Throws 400 `invalid_request` for a transfer coding other than `chunked` (its bytes would be kept coded). */
export function refuseTransferCoding(header: string | string[] | undefined): void {
  const other = members(header).find((c) => c !== 'chunked');
  if (other !== undefined)
    throw new GatewayError(
      'invalid_request',
      `Transfer-Encoding ${JSON.stringify(other)} is not taken: send the body as it is, chunked or with a Content-Length.`,
    );
}
