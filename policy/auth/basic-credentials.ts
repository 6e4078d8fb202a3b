/**
 * `Authorization: Basic base64(<user>:<api key>)`, for clients that cannot send a Bearer header
 * (Maven, pip/uv, apt, wget, aria2c, a URL with userinfo). The password is the key; the user name is
 * ignored (any value, or the principal's name). A key sent as the user name with an empty password
 * (`https://<key>@host/…`, token-as-user tools) is accepted too. Whatever comes out still goes
 * through the same key lookup as the Bearer form, so a bad one fails in the same way.
 */

const BASIC = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i;

/** The key carried by a Basic header, or undefined when the header is not a well-formed Basic one. */
export function keyFromBasic(header: string): string | undefined {
  const match = BASIC.exec(header);
  if (!match) return undefined;
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon === -1) return undefined;
  const user = decoded.slice(0, colon);
  const password = decoded.slice(colon + 1);
  return password === '' ? user : password;
}
