/**
 * The minimal Node baseline for bench/content.ts: every request streams the named file from the
 * directory with `fs.createReadStream(file).pipe(res)`. No auth, no Range, no catalog.
 *
 *   node bench/content-node-baseline.ts <dir> <port>
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const [dir, port] = process.argv.slice(2);
if (!dir || !port) throw new Error('usage: content-node-baseline.ts <dir> <port>');
http
  .createServer((req, res) => {
    const file = path.join(dir, path.basename(req.url ?? '/'));
    fs.stat(file, (err, st) => {
      if (err) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-length': st.size, 'content-type': 'application/octet-stream' });
      fs.createReadStream(file).pipe(res);
    });
  })
  .listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
