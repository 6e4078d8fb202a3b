/**
 * Pure: where a pre-signed link goes when the gateway is reached under a path prefix (a proxy at
 * `https://host/prefix/` that strips `/prefix` before the gateway). The gateway signs and later
 * checks the path it sees, without the prefix, and cannot know the prefix: the link it returns is
 * on its own path. The client put the prefix before the path it asked for, so it puts the same
 * prefix before the link's path; the proxy strips it again and the signature verifies.
 */
import { ArkvoryClientError } from './errors.ts';

/** A path segment as the gateway compares names: decoded, NFC; undefined when undecodable. */
function segmentName(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment).normalize('NFC');
  } catch {
    return undefined;
  }
}

/**
 * The link on the URL the presign request went to (`presignUrl`, ending in `…/presign`): its origin,
 * the path prefix before the gateway's own path, then `linkPath` (the gateway's `path`: its content
 * path and the link's query) as the gateway spelled it. Throws `protocol` when the path asked for
 * does not end with the path the gateway signed for (a proxy that rewrites more than a prefix): no
 * prefix would make that link reach the gateway.
 */
export function linkUrl(presignUrl: string, linkPath: string): string {
  const asked = new URL(presignUrl);
  const signed = /^([^?#]*)\/content(?:\?.*)?$/.exec(linkPath);
  const askedSegments = asked.pathname.split('/');
  const gatewaySegments = `${signed?.[1] ?? ''}/presign`.split('/');
  const cut = askedSegments.length - gatewaySegments.length;
  const same =
    signed !== null &&
    linkPath.startsWith('/') &&
    cut >= 0 &&
    gatewaySegments.every((segment, i) => {
      if (i === 0) return true; // before the leading slash: where the prefix ends
      const name = segmentName(segment);
      return name !== undefined && name === segmentName(askedSegments[cut + i]!);
    });
  if (!same)
    throw new ArkvoryClientError(
      'protocol',
      `The gateway made a link to ${linkPath.split('?')[0]}, which is not the path asked for (${asked.pathname}): a proxy in front rewrites paths, so the link cannot be placed behind it.`,
    );
  return `${asked.origin}${askedSegments.slice(0, cut + 1).join('/')}${linkPath}`;
}
