/**
 * The placeholders of examples and templates ("change-me", "changeme123", "replace-with-the-secret",
 * "<token>"). A secret the gateway checks callers against, left at such a value, opens what it guards
 * to anyone who read the example: it is refused at start instead of taken as typed.
 */
const PLACEHOLDER = /^(?:(?:change[-_ ]?me|replace[-_ ]?(?:with|me))(?![a-z])|<[^<>]*>$)/i;

export function isPlaceholderSecret(value: string): boolean {
  return PLACEHOLDER.test(value.trim());
}
