/**
 * Pure: the media type an upload declares for its artifact, whole (`Content-Type` of a PUT) or in
 * parts (`contentType` of a multipart session); both publish it alike and it is served back as the
 * artifact's `Content-Type`, so both take the same: `type/subtype` with parameters, at most 255
 * characters (a longer one overflows the header bounds of common clients, Node's 16 KiB among them,
 * and the artifact could no longer be downloaded with them).
 */
export const MAX_MEDIA_TYPE_LENGTH = 255;

const MEDIA_TYPE =
  /^[A-Za-z0-9!#$&^_.+-]+\/[A-Za-z0-9!#$&^_.+-]+(?:\s*;\s*[A-Za-z0-9!#$&^_.+-]+=(?:[A-Za-z0-9!#$&^_.+-]+|"[^"\\\r\n]*"))*$/;

export function isMediaType(value: string): boolean {
  return value.length <= MAX_MEDIA_TYPE_LENGTH && MEDIA_TYPE.test(value);
}
