import { request, type Dispatcher } from 'undici';
import { errorBody } from './error-body.ts';
import { gatewayError, unsendable } from './errors.ts';
import { linkUrl } from './link-prefix.ts';

export interface PresignedLink {
  readonly url: string;
  readonly path: string;
  readonly expiresAt: string;
  readonly methods: readonly string[];
}

/**
 * Asks the gateway for a pre-signed link to a target (`url` is its upload/metadata URL). The link is
 * returned on the origin this client used, whatever Host the gateway saw, and under the path prefix
 * `url` has before the gateway's own path (a proxy that strips it in front of the gateway):
 * `link-prefix.ts`. `path` stays the gateway's, the path the signature binds.
 */
export async function presign(options: {
  url: string;
  key: string;
  expiresInSeconds?: number;
  signal?: AbortSignal;
  dispatcher?: Dispatcher;
}): Promise<PresignedLink> {
  const presignUrl = `${options.url}/presign`;
  const res = await request(presignUrl, {
    method: 'POST',
    headers: { authorization: `Bearer ${options.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(options.expiresInSeconds === undefined ? {} : { expiresInSeconds: options.expiresInSeconds }),
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
  }).catch((err: unknown) => {
    throw unsendable(err) ?? err;
  });
  if (res.statusCode !== 201) throw gatewayError(res.statusCode, await errorBody(res.body));
  const link = JSON.parse(await res.body.text()) as PresignedLink;
  return { ...link, url: linkUrl(presignUrl, link.path) };
}
