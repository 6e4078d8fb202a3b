/**
 * The key-check service of bench/peer.ts: the minimal Node service a user puts behind nginx's
 * `auth_request`. It hashes the Bearer key of each subrequest (SHA-256, as keys are stored), looks
 * the principal up, checks that the principal may read the repository named in `X-Original-URI`,
 * and answers 204 (allowed), 401 (no or unknown key) or 403 (no grant), keeping connections alive.
 *
 *   node bench/peer-key-check.ts <keys file: one "sha256hex repository" a line> <port>
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

const [keysFile, port] = process.argv.slice(2);
if (!keysFile || !port) throw new Error('usage: peer-key-check.ts <keys file> <port>');
const grants = new Map<string, Set<string>>();
for (const line of readFileSync(keysFile, 'utf8').split('\n')) {
  const [hash, repository] = line.trim().split(' ');
  if (!hash || !repository) continue;
  const repos = grants.get(hash) ?? new Set<string>();
  repos.add(repository);
  grants.set(hash, repos);
}
const REPOSITORY = /^\/files\/([^/]+)\//;

const server = http.createServer((req, res) => {
  const authorization = req.headers.authorization;
  const key = authorization?.startsWith('Bearer ') ? authorization.slice(7) : undefined;
  const repos = key === undefined ? undefined : grants.get(createHash('sha256').update(key).digest('hex'));
  if (repos === undefined) {
    res.writeHead(401).end();
    return;
  }
  const uri = req.headers['x-original-uri'];
  const repository = typeof uri === 'string' ? REPOSITORY.exec(uri)?.[1] : undefined;
  res.writeHead(repository !== undefined && repos.has(repository) ? 204 : 403).end();
});
server.keepAliveTimeout = 60_000;
server.listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
