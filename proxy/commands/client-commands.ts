/**
 * `arkvory get`, `put` and `presign`: the client SDK (client/) on the command line, talking to a
 * gateway or router over HTTP (not to the database). The gateway is `--url` or ARKVORY_URL; the key
 * is read from ARKVORY_KEY or the file named by `--key-file` / ARKVORY_KEY_FILE, never from argv
 * (argv is visible to every user of the machine).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  ArkvoryClientError,
  baseUrlOf,
  contentUrl,
  download,
  presign,
  progressBar,
  progressJson,
  targetOf,
  upload,
  type Progress,
} from '../../client/index.ts';
import { parseDuration } from './auth-commands.ts';
import { parseArgs, UsageError, type Command } from './command.ts';

const CONNECTION_NOTE = `The gateway (or router) is --url or ARKVORY_URL. The API key is ARKVORY_KEY, or the file named by
--key-file or ARKVORY_KEY_FILE. Errors: "arkvory: <code>: <message>" on stderr, exit 1.`;

/** `16M`, `1G`, `512K` or a byte count. */
export function parseSize(text: string): number {
  const m = /^(\d+)([KMG]?)(?:i?B)?$/i.exec(text);
  if (!m) throw new UsageError(`"${text}" is not a size (e.g. 8M, 1G, 1048576)`);
  const n = Number(m[1]) * { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[m[2]!.toUpperCase() as '' | 'K' | 'M' | 'G'];
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`"${text}" must be a positive size`);
  return n;
}

async function keyFrom(
  flags: Map<string, string | true>,
  env: NodeJS.ProcessEnv,
  required: boolean,
): Promise<string | undefined> {
  const file = flags.get('key-file') ?? env.ARKVORY_KEY_FILE;
  if (typeof file === 'string') return (await readFile(file, 'utf8')).trim();
  if (env.ARKVORY_KEY) return env.ARKVORY_KEY.trim();
  if (required)
    throw new UsageError('no API key: set ARKVORY_KEY, or ARKVORY_KEY_FILE / --key-file naming a file that holds it');
  return undefined;
}

function gatewayUrl(flags: Map<string, string | true>, env: NodeJS.ProcessEnv): string | undefined {
  const url = flags.get('url') ?? env.ARKVORY_URL;
  return typeof url === 'string' ? url : undefined;
}

/** Runs a client action; a client or gateway refusal is one line on stderr and exit 1. */
async function reporting(action: () => Promise<unknown>): Promise<number> {
  try {
    process.stdout.write(`${JSON.stringify(await action(), null, 2)}\n`);
    return 0;
  } catch (err) {
    if (err instanceof ArkvoryClientError) {
      process.stderr.write(`arkvory: ${err.code}: ${err.message}\n`);
      return 1;
    }
    // A local file problem (missing input, unwritable output directory) is the user's to fix: one line, no stack.
    const errno = err as NodeJS.ErrnoException;
    if (typeof errno.code === 'string' && typeof errno.syscall === 'string') {
      process.stderr.write(`arkvory: io: ${errno.message}\n`);
      return 1;
    }
    throw err;
  }
}

/** Pulls every `--name value` of a repeatable flag out of argv (parseArgs keeps only the last). */
function takeRepeated(args: string[], name: string): { rest: string[]; values: string[] } {
  const rest: string[] = [];
  const values: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === `--${name}`) {
      const value = args[++i];
      if (value === undefined) throw new UsageError(`--${name} needs a value`);
      values.push(value);
    } else if (arg.startsWith(`--${name}=`)) values.push(arg.slice(name.length + 3));
    else rest.push(arg);
  }
  return { rest, values };
}

/** Progress on stderr: a redrawn bar on a terminal, a JSON line a second otherwise. */
function progressPrinter(): { onProgress(p: Progress): void; intervalMs: number } {
  if (process.stderr.isTTY) {
    return {
      intervalMs: 200,
      onProgress: (p) => process.stderr.write(`\r${progressBar(p, process.stderr.columns ?? 80)}${p.done ? '\n' : ''}`),
    };
  }
  return { intervalMs: 1000, onProgress: (p) => process.stderr.write(`${progressJson(p)}\n`) };
}

export const getCommand: Command = {
  name: 'get',
  summary: 'download an artifact, resuming after cuts and moving to other gateways; verifies the digest',
  usage: `Usage:
  arkvory get <url|repo/id|repo/name/version[/asset]> [-o FILE] [--mirror URL]... [--url URL] [--key-file FILE]

Downloads to FILE (default: the last path segment) through <FILE>.partial, resuming with Range and
If-Range after any cut (also after a restart of this command), moving to the next --mirror (another
gateway's origin, or a full URL) when a gateway answers 502/503/504 or the connection drops, waiting
Retry-After on 429, and verifying the whole file against the digest the gateway publishes before it
takes the final name. A pre-signed link needs no key. Progress goes to stderr (a bar on a terminal,
JSON lines otherwise); the result is JSON on stdout.
${CONNECTION_NOTE}`,
  async run(args, env) {
    const mirrors = takeRepeated(
      args.map((a) => (a === '-o' ? '--output' : a)),
      'mirror',
    );
    const { flags, positionals } = parseArgs(mirrors.rest);
    if (positionals.length !== 1) throw new UsageError('expected: get <url|repo/path> [-o FILE]');
    const key = await keyFrom(flags, env, false);
    const printer = progressPrinter();
    return reporting(async () => {
      const url = contentUrl(positionals[0]!, gatewayUrl(flags, env));
      const output =
        typeof flags.get('output') === 'string'
          ? String(flags.get('output'))
          : decodeURIComponent(
              new URL(url).pathname
                .replace(/\/content$/, '')
                .split('/')
                .pop()!,
            );
      const controller = new AbortController();
      const stop = () => controller.abort(new Error('interrupted'));
      process.once('SIGINT', stop);
      try {
        return await download({
          url,
          mirrors: mirrors.values,
          output: path.resolve(output),
          key,
          signal: controller.signal,
          onProgress: printer.onProgress,
          progressIntervalMs: printer.intervalMs,
        });
      } finally {
        process.off('SIGINT', stop);
      }
    });
  },
};

export const putCommand: Command = {
  name: 'put',
  summary: 'upload a file with Content-Digest; large files in parallel parts, resuming a killed upload',
  usage: `Usage:
  arkvory put <file> <repo/id|repo/name/version[/asset]|url> [--content-type TYPE] [--threshold 64M] [--part-size 16M] [--concurrency 4] [--url URL] [--key-file FILE]

Files up to --threshold are sent in one streamed PUT with Content-Digest. Larger files use the multipart
API: --part-size parts, at most --concurrency in flight; the session is remembered under
~/.cache/arkvory/uploads, so running the same command again after a kill sends only the parts the gateway
does not hold yet, then waits for the completion job. The result is JSON on stdout.
${CONNECTION_NOTE}`,
  async run(args, env) {
    const { flags, positionals } = parseArgs(args);
    if (positionals.length !== 2) throw new UsageError('expected: put <file> <repo/path|url>');
    const key = (await keyFrom(flags, env, true))!;
    const size = (name: string) =>
      typeof flags.get(name) === 'string' ? parseSize(String(flags.get(name))) : undefined;
    const concurrency = flags.get('concurrency');
    if (concurrency !== undefined && !/^[1-9][0-9]?$/.test(String(concurrency)))
      throw new UsageError('--concurrency must be 1 to 99');
    const contentType = flags.get('content-type');
    return reporting(() =>
      upload({
        file: positionals[0]!,
        url: baseUrlOf(positionals[1]!, gatewayUrl(flags, env)),
        key,
        ...(typeof contentType === 'string' ? { contentType } : {}),
        ...(size('threshold') !== undefined ? { multipartThreshold: size('threshold')! } : {}),
        ...(size('part-size') !== undefined ? { partSize: size('part-size')! } : {}),
        ...(concurrency !== undefined ? { concurrency: Number(concurrency) } : {}),
        ...(env.ARKVORY_UPLOAD_STATE_DIR ? { stateDir: env.ARKVORY_UPLOAD_STATE_DIR } : {}),
      }),
    );
  },
};

export const presignCommand: Command = {
  name: 'presign',
  summary: 'make a link to an artifact that needs no header (browsers, CDNs, download managers)',
  usage: `Usage:
  arkvory presign <repo> <artifact|package/version[/asset]> [--expires 1h] [--url URL] [--key-file FILE]

Prints JSON with the link (on the --url origin), its expiry and the methods it allows (GET, HEAD). The
link is bound to that one target and to the key that made it: revoking the key, removing its grant or
disabling its principal kills the link within 2 s. --expires defaults to 1h, at most the gateway's
ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS (default 7d).
${CONNECTION_NOTE}`,
  async run(args, env) {
    const { flags, positionals } = parseArgs(args);
    if (positionals.length !== 2) throw new UsageError('expected: presign <repo> <artifact|package/version[/asset]>');
    const key = (await keyFrom(flags, env, true))!;
    const base = gatewayUrl(flags, env);
    if (!base) throw new UsageError('no gateway: give --url or set ARKVORY_URL');
    const expires = flags.get('expires');
    const expiresInSeconds = expires === undefined ? undefined : parseDuration(String(expires));
    return reporting(async () => {
      const target = targetOf(positionals[0]!, positionals[1]!.split('/'));
      return presign({
        url: `${base.replace(/\/+$/, '')}${target.basePath}`,
        key,
        ...(expiresInSeconds !== undefined ? { expiresInSeconds } : {}),
      });
    });
  },
};
