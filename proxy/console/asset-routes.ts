/** The console page and its two assets, read once at start and served with `no-cache`. */
import { readFile } from 'node:fs/promises';
import { PolicyError } from '../../policy/errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { page } from './console-http.ts';
import { publicBase, type PublicBaseOptions } from '../server/public-base.ts';

const STATIC_DIR = new URL('./static/', import.meta.url);
const ASSETS: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

/** `base`: where browsers reach the gateway; the redirect to the page keeps its path prefix. */
export async function assetRoutes(base: PublicBaseOptions): Promise<Route[]> {
  const assets = new Map<string, Buffer>();
  for (const name of Object.keys(ASSETS)) assets.set(name, await readFile(new URL(name, STATIC_DIR)));
  const sendAsset = (ctx: RequestContext, name: string) => {
    const body = assets.get(name)!;
    ctx.res.writeHead(200, {
      'content-type': ASSETS[name]!,
      'content-length': body.length,
      'cache-control': 'no-cache',
    });
    ctx.res.end(ctx.req.method === 'HEAD' ? undefined : body);
  };
  return [
    // Behind a path prefix (ARKVORY_PUBLIC_URL's, or a trusted proxy's X-Forwarded-Prefix) the page is
    // at <prefix>/console/; the page itself names its assets and its API relative to its own URL.
    page(['GET', 'HEAD'], '/console', async ({ req, res }) => {
      res.writeHead(308, { location: `${publicBase(req, base).prefix}/console/`, 'content-length': 0 }).end();
    }),
    page(['GET', 'HEAD'], '/console/', async (ctx) => sendAsset(ctx, 'index.html')),
    page(['GET', 'HEAD'], '/console/static/:file', async (ctx) => {
      const name = ctx.params.file!;
      if (!Object.hasOwn(ASSETS, name) || name === 'index.html')
        throw new PolicyError('not_found', 'No such console asset.');
      sendAsset(ctx, name);
    }),
  ];
}
