/**
 * Pure: whether an upload's `Content-Encoding` names a content coding. The gateway publishes the
 * bytes it receives, so a coded body (gzip, br…) would be published as its coded bytes and served
 * without the coding, as other bytes than the representation sent; such a body is refused with 415
 * (RFC 9110 §15.5.16, with `Accept-Encoding: identity` as RFC 7694 asks). `identity` is no coding.
 */
import { GatewayError } from '../server/errors.ts';

export function hasContentCoding(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  const codings = (Array.isArray(header) ? header.join(',') : header).split(',').map((c) => c.trim().toLowerCase());
  return codings.some((c) => c !== '' && c !== 'identity');
}

/** Throws 415 `unsupported_content_encoding` for a body with a content coding. */
export function refuseContentCoding(header: string | string[] | undefined): void {
  if (hasContentCoding(header))
    throw new GatewayError('unsupported_content_encoding', undefined, { headers: { 'accept-encoding': 'identity' } });
}
