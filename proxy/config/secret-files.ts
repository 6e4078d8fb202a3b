/**
 * Secrets from files (`…_FILE`, the convention of the official PostgreSQL and Redis images; what
 * systemd `LoadCredential=` and Kubernetes Secret volumes hand over). Generic on purpose: any
 * secret-bearing setting (a TLS key too) reads its file through `readSecretFile`. A file others can
 * read is refused: the point of a file over a variable is that no other user or child process sees it.
 */
import { readFileSync, statSync } from 'node:fs';

/** Where a secret came from; `arkvory doctor` prints this, never the value. */
export type SecretSource = 'env' | 'file' | 'unset';

export class SecretFileError extends Error {
  override readonly name = 'SecretFileError';
  readonly code = 'secret_file_refused';
}

const WORLD_BITS = 0o007;
const GROUP_BITS = 0o070;

/**
 * Whether group access is acceptable: only when the group is this process's own primary group, as
 * with Kubernetes' fsGroup = runAsGroup (kubelet makes Secret files 0440 root:<fsGroup>, a group
 * only the pod's processes hold). Any other group, and any world bit, is refused.
 */
function ownGroup(gid: number): boolean {
  return typeof process.getegid === 'function' && process.getegid() === gid && gid !== 0;
}

/**
 * The secret in `file`: its text without one trailing newline (editors and `echo` add one). Refuses a
 * missing, non-regular, empty or group/world-accessible file; the message names the file, never its content.
 */
export function readSecretFile(file: string): string {
  let mode: number;
  let gid: number;
  try {
    const st = statSync(file);
    if (!st.isFile()) throw new SecretFileError(`${file} is not a regular file`);
    mode = st.mode;
    gid = st.gid;
  } catch (err) {
    if (err instanceof SecretFileError) throw err;
    throw new SecretFileError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  if ((mode & WORLD_BITS) !== 0 || ((mode & GROUP_BITS) !== 0 && !ownGroup(gid)))
    throw new SecretFileError(
      `${file} is accessible to group or others (mode ${(mode & 0o777).toString(8).padStart(4, '0')}); make it readable by the service user only (chmod 0400 or 0600; Kubernetes: defaultMode 0400)`,
    );
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SecretFileError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  const value = text.replace(/\r?\n$/, '');
  if (value.length === 0) throw new SecretFileError(`${file} is empty`);
  return value;
}

/**
 * The variables that may come from a file, and the one their file form fills. `rotates`: a running
 * process reads the file again on SIGHUP and on a change (proxy/config/secret-rotation.ts); the
 * others are read at start only.
 */
export const SECRET_FILE_VARIABLES: ReadonlyArray<{ file: string; fills: string; what: string; rotates: boolean }> = [
  { file: 'ARKVORY_DATABASE_URL_FILE', fills: 'ARKVORY_DATABASE_URL', what: 'the PostgreSQL URL', rotates: true },
  {
    file: 'ARKVORY_DATABASE_PASSWORD_FILE',
    fills: 'ARKVORY_DATABASE_PASSWORD',
    what: 'the PostgreSQL password',
    rotates: true,
  },
  { file: 'ARKVORY_REDIS_URL_FILE', fills: 'ARKVORY_REDIS_URL', what: 'the Redis URL(s)', rotates: true },
  { file: 'ARKVORY_REDIS_PASSWORD_FILE', fills: 'ARKVORY_REDIS_PASSWORD', what: 'the Redis password', rotates: true },
  {
    file: 'ARKVORY_METRICS_TOKEN_FILE',
    fills: 'ARKVORY_METRICS_TOKEN',
    what: 'the /metrics bearer token',
    rotates: true,
  },
  {
    file: 'ARKVORY_RULES_SERVICE_TOKEN_FILE',
    fills: 'ARKVORY_RULES_SERVICE_TOKEN',
    what: 'the rules-service token',
    rotates: true,
  },
  { file: 'ARKVORY_S3_ACCESS_KEY_ID_FILE', fills: 'AWS_ACCESS_KEY_ID', what: 'the S3 access key id', rotates: true },
  {
    file: 'ARKVORY_S3_SECRET_ACCESS_KEY_FILE',
    fills: 'AWS_SECRET_ACCESS_KEY',
    what: 'the S3 secret access key',
    rotates: true,
  },
  { file: 'ARKVORY_S3_SESSION_TOKEN_FILE', fills: 'AWS_SESSION_TOKEN', what: 'the S3 session token', rotates: true },
];

export interface ResolvedSecrets {
  /** `env` with every file form read into the variable it fills. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Per filled variable: env, file or unset. */
  readonly sources: Readonly<Record<string, SecretSource>>;
  readonly problems: readonly string[];
}

/** Reads every `…_FILE` variable set in `env`; setting both forms of one secret is a problem. */
export function resolveSecretFiles(
  env: Readonly<Record<string, string | undefined>>,
  read: (file: string) => string = readSecretFile,
): ResolvedSecrets {
  const out: Record<string, string | undefined> = { ...env };
  const sources: Record<string, SecretSource> = {};
  const problems: string[] = [];
  for (const { file, fills } of SECRET_FILE_VARIABLES) {
    const path = env[file];
    const direct = env[fills];
    if (path === undefined || path === '') {
      sources[fills] = direct === undefined || direct === '' ? 'unset' : 'env';
      continue;
    }
    delete out[file];
    if (direct !== undefined && direct !== '') {
      problems.push(`${file}: ${fills} is set too; give the secret one way only`);
      continue;
    }
    try {
      out[fills] = read(path);
      sources[fills] = 'file';
    } catch (err) {
      problems.push(`${file}: ${(err as Error).message}`);
    }
  }
  return { env: out, sources, problems };
}
