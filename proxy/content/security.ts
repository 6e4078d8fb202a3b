/**
 * Headers that keep uploaded bytes inert when a browser opens them on the gateway's origin (the
 * console lives there too): never sniffed into another type, sandboxed if rendered, and saved
 * rather than shown unless the type is one a browser only displays. Values are constants, so the
 * hot path adds no allocation.
 */
export const CONTENT_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'x-content-type-options': 'nosniff',
  // A unique opaque origin, no scripts, forms, popups or plugins, whatever the bytes are.
  'content-security-policy': 'sandbox',
});

/** Media types a browser only displays (no markup, no script): they may stay inline. */
const INERT =
  /^(?:text\/plain|application\/json|application\/octet-stream|image\/(?:png|jpeg|gif|webp|avif))\s*(?:;|$)/i;

/** `attachment` for every type a browser could render or run (HTML, SVG, XML, JavaScript, PDF…). */
export function needsAttachment(contentType: string): boolean {
  return !INERT.test(contentType);
}
