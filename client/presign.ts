import { request, type Dispatcher } from 'undici';
import { gatewayError, unsendable } from './errors.ts';

export interface PresignedLink {
  readonly url: string;
  readonly path: string;
  readonly expiresAt: string;
  readonly methods: readonly string[];
}

/**
 * Asks the gateway for a pre-signed link to a target (`baseUrl` is its upload/metadata URL). The link
 * is returned on the origin this client used, whatever Host the gateway saw.
 */
export async function presign(options: {
  url: string;
  key: string;
  expiresInSeconds?: number;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
}): Promise<PresignedLink> {
  const res = await request(`${options.url}/presign`, {
    method: 'POST',
    headers: { authorization: `Bearer ${options.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(options.expiresInSeconds === undefined ? {} : { expiresInSeconds: options.expiresInSeconds }),
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
  }).catch((err: unknown) => {
    throw unsendable(err) ?? err;
  });
  const text = await res.body.text();
  if (res.statusCode !== 201) throw gatewayError(res.statusCode, text);
  const link = JSON.parse(text) as PresignedLink;
  return { ...link, url: `${new URL(options.url).origin}${link.path}` };
}
