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
}): Promise<string> {
  let text = await readFile(path.join(REPO_ROOT, 'deploy/static-store/arkvory-store.conf'), 'utf8');
  const replace = (from: string, to: string) => {
    if (!text.includes(from))
      throw new Error(
        `deploy/static-store/arkvory-store.conf no longer contains "${from}"; update test/support/static-store.ts`,
      );
    text = text.replaceAll(from, to);
  };
  replace('listen 10.0.0.20:8081;', `listen ${options.host ?? '127.0.0.1'}:${options.port};`);
  replace('alias /srv/arkvory-store/;', `alias ${options.root}/;`);
  // The multi-host suite (test/hosts) puts the store on its own host and lets only the writer write.
  replace('allow 10.0.0.5;', `allow ${options.writer ?? '127.0.0.1'};`);
  if (!options.move) replace('dav_methods PUT DELETE MOVE;', 'dav_methods PUT DELETE;');
  return text;
}
