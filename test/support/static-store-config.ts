/** The nginx site of the static-HTTP store for tests and benchmarks (no vitest imports here). */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { REPO_ROOT } from '../harness/paths.ts';

/**
 * The shipped deploy/static-store/arkvory-store.conf with only the address, the root and the
 * writer's address replaced, so the example itself is what the tests run against.
 */
export async function siteConfig(options: {
  port: number;
  root: string;
  move: boolean;
  host?: string;
  writer?: string;
  /** Serve HTTPS with this PEM chain and key (nginx's `listen … ssl`), as a store behind TLS. */
  tls?: { certFile: string; keyFile: string };
}): Promise<string> {
  let text = await readFile(path.join(REPO_ROOT, 'deploy/static-store/arkvory-store.conf'), 'utf8');
  const replace = (from: string, to: string) => {
    if (!text.includes(from))
      throw new Error(
        `deploy/static-store/arkvory-store.conf no longer contains "${from}"; update test/support/static-store.ts`,
      );
    text = text.replaceAll(from, to);
  };
  const address = `${options.host ?? '127.0.0.1'}:${options.port}`;
  replace(
    'listen 10.0.0.20:8081;',
    options.tls
      ? `listen ${address} ssl;\n    ssl_certificate ${options.tls.certFile};\n    ssl_certificate_key ${options.tls.keyFile};\n    ssl_protocols TLSv1.2 TLSv1.3;`
      : `listen ${address};`,
  );
  replace('alias /srv/arkvory-store/;', `alias ${options.root}/;`);
  // The multi-host suite (test/hosts) puts the store on its own host and lets only the writer write.
  replace('allow 10.0.0.5;', `allow ${options.writer ?? '127.0.0.1'};`);
  if (!options.move) replace('dav_methods PUT DELETE MOVE MKCOL;', 'dav_methods PUT DELETE MKCOL;');
  return text;
}
