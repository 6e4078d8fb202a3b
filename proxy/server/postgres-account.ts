/**
 * The account and environment every process of the embedded PostgreSQL runs with (initdb, the
 * server, and the few system commands run for them).
 */
import { readFile } from 'node:fs/promises';

/** The `postgres` account's ids, which the server runs as when we are root (it refuses to run as root). */
export async function postgresIds(): Promise<{ uid: number; gid: number } | undefined> {
  const passwd = await readFile('/etc/passwd', 'utf8').catch(() => '');
  const line = passwd.split('\n').find((l) => l.startsWith('postgres:'));
  if (!line) return undefined;
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** What these processes may see of our environment: how to find and name things, never a variable of ours. */
const POSTGRES_VARIABLES = /^(PATH|HOME|LANG|LC_[A-Z]+|TZ|TMPDIR|LD_LIBRARY_PATH)$/;

/**
 * The environment of a process run for the embedded PostgreSQL: ours, less everything but locale,
 * time zone and paths. Ours holds the gateway's secrets (ARKVORY_METRICS_TOKEN, AWS_SECRET_ACCESS_KEY,
 * a Redis URL with its password, …), and initdb and the server run as another account when we are
 * root: whatever runs as that account (or a superuser of any cluster it runs, with COPY … FROM
 * PROGRAM) reads /proc/<pid>/environ, and a core dump holds it.
 */
export function postgresEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => POSTGRES_VARIABLES.test(name)));
}
