import { GatewayError } from './errors.ts';
import type { Gate } from './http-server.ts';

const READ_METHODS = new Set(['GET', 'HEAD']);

/**
 * A reader accepts no HTTP modification, whatever the key's scopes: every other method is 405
 * `read_only` with `Allow: GET, HEAD`, before authentication (it reveals nothing).
 */
export const readOnlyGate: Gate = async (ctx) => {
  if (!READ_METHODS.has(ctx.req.method ?? '')) {
    throw new GatewayError('read_only', undefined, { headers: { allow: 'GET, HEAD' } });
  }
};
