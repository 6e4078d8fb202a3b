/**
 * Credentials in URLs (`scheme://user:password@host`) must never reach a log line or an error
 * message: configuration problems, startup logs and anything else that echoes an operator's URL go
 * through here. Works on text that is not a valid URL too (a malformed value is still echoed).
 */
// Up to the last `@` before the host: a password may hold `@` (`//svc:p@ss@host`), never `/`, `?` or `#`.
const USERINFO = /(\/\/)[^/?#\s"]*@/g;

export const REDACTED_USERINFO = '<redacted>@';

/** `text` with the user-info part of every `//user:pass@` in it replaced by `<redacted>@`. */
export function redactUserinfo(text: string): string {
  return text.replace(USERINFO, `$1${REDACTED_USERINFO}`);
}
