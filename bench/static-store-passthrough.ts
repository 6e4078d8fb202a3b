/**
 * Reference for bench/static-store.ts: the least a Node process can do between a client and the
 * static store with undici (one keep-alive Pool, request → response, write/drain), with no auth,
 * catalog, Range planning or governors. Its figure is the ceiling of any gateway→nginx path here.
 *
 *   node bench/static-store-passthrough.ts <store base URL> <port>   (prints "ready")
 */
import http from 'node:http';
import { Pool } from 'undici';

const [baseUrl, port] = process.argv.slice(2);
if (!baseUrl || !port) throw new Error('usage: static-store-passthrough.ts <store base URL> <port>');
const base = new URL(baseUrl);
const pool = new Pool(base.origin);

http
  .createServer((req, res) => {
    void (async () => {
      const upstream = await pool.request({
        method: 'GET',
        path: `${base.pathname}${(req.url ?? '/').slice(1)}`,
        highWaterMark: 256 * 1024,
      });
      res.writeHead(upstream.statusCode, { 'content-length': String(upstream.headers['content-length']) });
      for await (const chunk of upstream.body) {
        if (!res.write(chunk) && res.writableLength >= 512 * 1024)
          await new Promise((resolve) => res.once('drain', resolve));
      }
      res.end();
    })().catch(() => res.destroy());
  })
  .listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
