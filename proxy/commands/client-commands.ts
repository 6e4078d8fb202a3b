/**
 * `arkvory get`, `put` and `presign`: the client SDK (client/) on the command line, talking to a
 * gateway or router over HTTP (not to the database). The gateway is `--url` or ARKVORY_URL; the key
 * is read from ARKVORY_KEY or the file named by `--key-file` / ARKVORY_KEY_FILE, never from argv
 * (argv is visible to every user of the machine). The SDK (and undici under it) is loaded when one
 * of them runs: every other command lists these three in its help without loading it.
 */
import { decimalInteger } from '../../lib/decimal.ts';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { text } from 'node:stream/consumers';
import { CLIENT_VARIABLES } from '../../client/environment.ts';
import type { Progress } from '../../client/index.ts';
import { hasPresignParams } from '../../policy/auth/presign-signature.ts';
import { parseDuration } from './auth-commands.ts';
import { defineCommand, form, UsageError, type Command, type OptionSpec } from './command.ts';

const sdk = () => import('../../client/index.ts');

const CONNECTION_NOTE = `The gateway (or router) is --url or ARKVORY_URL. The API key is ARKVORY_KEY, or the file named by
--key-file or ARKVORY_KEY_FILE. Errors: "arkvory: <code>: <message>" on stderr, exit 1.`;

/**
 * `16M`, `1G`, `512K` or a byte count, its digits read as every numeric option's (lib/decimal.ts);
 * `zero` where 0 means something (a quota that allows nothing more), in any spelling (`0`, `00`, `0K`).
 */
export function parseSize(text: string, options: { zero?: boolean } = {}): number {
  const m = /^([0-9]+)([KMG]?)(?:i?B)?$/i.exec(text);
  if (!m) throw new UsageError(`"${text}" is not a size (e.g. 8M, 1G, 1048576)`);
  const count = decimalInteger(m[1]!);
  const n =
    count === undefined
      ? Number.NaN
      : count * { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[m[2]!.toUpperCase() as '' | 'K' | 'M' | 'G'];
  if (!Number.isSafeInteger(n) || n < 0 || (n === 0 && !options.zero))
    throw new UsageError(
      `"${text}" must be a ${options.zero ? '' : 'positive '}size of at most ${Number.MAX_SAFE_INTEGER} bytes`,
    );
  return n;
}

/** The most parts `arkvory put` sends at once. */
export const MAX_UPLOAD_CONCURRENCY = 99;

/** The options every client command takes: where the gateway is and where the key is. */
const CONNECTION_OPTIONS = {
  url: { type: 'string', value: 'URL', description: 'the gateway or router (default: ARKVORY_URL)' },
  'key-file': {
    type: 'string',
    value: 'FILE',
    description: 'a file holding the API key (default: ARKVORY_KEY, else the file named by ARKVORY_KEY_FILE)',
  },
} as const satisfies Record<string, OptionSpec>;

async function keyFrom(
  keyFile: string | undefined,
  env: NodeJS.ProcessEnv,
  required: boolean,
): Promise<string | undefined> {
  const file = keyFile ?? env[CLIENT_VARIABLES.keyFile];
  if (typeof file === 'string') return (await readFile(file, 'utf8')).trim();
  const key = env[CLIENT_VARIABLES.key];
  if (key) return key.trim();
  if (required)
    throw new UsageError('no API key: set ARKVORY_KEY, or ARKVORY_KEY_FILE / --key-file naming a file that holds it');
  return undefined;
}

/**
 * `key` when every character of it is printable ASCII, as every key is. Anything else (a second
 * line, a zero-width space pasted along with it) no header can carry: refused before any request,
 * rather than retried as a failing gateway. The key is not quoted back.
 */
export function sendableKey(key: string): string {
  if (/^[\x21-\x7e]+$/.test(key)) return key;
  throw new UsageError(
    'the API key (ARKVORY_KEY, or the key file) holds a blank, a control or a non-ASCII character (a second line, or one pasted along with it); no request was sent',
  );
}

/** `text` when it is an http(s) URL; else a usage error naming `what` (not quoting it: a link or user info is a credential). */
export function httpUrl(text: string, what: string): string {
  const protocol = URL.canParse(text) ? new URL(text).protocol : undefined;
  if (protocol !== 'http:' && protocol !== 'https:') throw new UsageError(`${what} is not an http:// or https:// URL`);
  return text;
}

function gatewayUrl(url: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  const base = url ?? env[CLIENT_VARIABLES.url];
  return base === undefined ? undefined : httpUrl(base, '--url or ARKVORY_URL');
}

/** Runs a client action; a client or gateway refusal is one line on stderr and exit 1. */
async function reporting(action: () => Promise<unknown>): Promise<number> {
  const { ArkvoryClientError } = await sdk();
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

/** Progress on stderr: a redrawn bar on a terminal, a JSON line a second otherwise. */
async function progressPrinter(): Promise<{ onProgress(p: Progress): void; intervalMs: number }> {
  const { progressBar, progressJson } = await sdk();
  if (process.stderr.isTTY) {
    return {
      intervalMs: 200,
      onProgress: (p) => process.stderr.write(`\r${progressBar(p, process.stderr.columns ?? 80)}${p.done ? '\n' : ''}`),
    };
  }
  return { intervalMs: 1000, onProgress: (p) => process.stderr.write(`${progressJson(p)}\n`) };
}

export const getCommand: Command = defineCommand({
  name: 'get',
  summary: 'download an artifact, resuming after cuts and moving to other gateways; verifies the digest',
  description: `Downloads to FILE (default: the URL's last path segment, never a path, a control character or more
than 255 bytes) through <FILE>.partial, resuming with Range and
If-Range after any cut (also after a restart of this command), moving to the next --mirror (another
gateway's origin, or a full URL) when a gateway answers 502/503/504 or the connection drops, waiting
Retry-After on 429, and verifying the whole file against the digest the gateway publishes (then
flushing it to disk) before it takes the final name; a file already there keeps its permission bits
(and, run as root, its owner). One run at a time writes FILE (<FILE>.partial.lock; another fails with
target_locked; a killed run's lock is taken over). A directory at any of those names fails with
output_is_directory before anything is fetched; a full disk with no_space, the bytes written kept for the
next run, as after Ctrl-C (aborted).
The key goes only to the origin of --url/ARKVORY_URL and of each --mirror: a URL on any other origin
is fetched without credentials (a public object works, else 401), a pre-signed link never gets it,
and redirects are not followed. Progress goes to stderr (a bar on a terminal, JSON lines otherwise);
the result is JSON on stdout. A pre-signed link is a credential, and an argument is readable by
every local user (ps, /proc/<pid>/cmdline) and kept in shell history: give a link with --link-file
FILE, or --link-file - to read it from standard input.
${CONNECTION_NOTE}`,
  forms: [
    form({
      args: '[url|repo/id|repo/name/version[/asset]]',
      options: {
        'link-file': {
          type: 'string',
          value: 'FILE',
          description:
            'read the URL (a pre-signed link) from FILE, or from standard input for "-", instead of the command line',
        },
        output: {
          type: 'string',
          short: 'o',
          value: 'FILE',
          description: 'where to write the file (default: the last path segment)',
        },
        mirror: {
          type: 'string',
          multiple: true,
          value: 'URL',
          description: 'another gateway to move to (an origin: the same path there; or a full URL)',
        },
        ...CONNECTION_OPTIONS,
      },
      async run(input, env) {
        const key = await keyFrom(input.string('key-file'), env, false);
        const printer = await progressPrinter();
        const { ArkvoryClientError, contentUrl, download, KeyScope } = await sdk();
        return reporting(async () => {
          const base = gatewayUrl(input.string('url'), env);
          const mirrors = input.strings('mirror').map((m) => httpUrl(m, '--mirror'));
          const url = httpUrl(
            contentUrl(await whatToGet(input.positionals[0], input.string('link-file')), base),
            'the URL to get',
          );
          const output = input.string('output') ?? outputNameOf(url);
          // A pre-signed link is its own credential, and may come from anyone: ARKVORY_KEY is not
          // sent to the host it names (nor would the gateway then hold the link to its content).
          const isLink = hasPresignParams(new URL(url).searchParams);
          // Any other URL may come from anyone too: the key goes only to the gateways named by the
          // operator, and a URL on another origin is fetched without credentials (a public object works).
          const keyOrigins = [...(base === undefined ? [] : [base]), ...mirrors];
          const withheld = key !== undefined && !isLink && !new KeyScope(keyOrigins).allows(url);
          const controller = new AbortController();
          const stop = () => controller.abort(new Error('interrupted'));
          process.once('SIGINT', stop);
          try {
            return await download({
              url,
              mirrors,
              output: path.resolve(output),
              key: isLink || key === undefined ? undefined : sendableKey(key),
              keyOrigins,
              signal: controller.signal,
              onProgress: printer.onProgress,
              progressIntervalMs: printer.intervalMs,
            });
          } catch (err) {
            if (withheld && err instanceof ArkvoryClientError && err.status === 401)
              throw new ArkvoryClientError(
                err.code,
                `${err.message} (${keyWithheldNote(url, 'the --url or ARKVORY_URL and --mirror origins')})`,
                { status: 401 },
              );
            throw err;
          } finally {
            process.off('SIGINT', stop);
          }
        });
      },
    }),
  ],
});

/**
 * What `get` downloads: its argument, or the one line of --link-file (`-`: standard input), which
 * keeps a link off the command line that every local user can read.
 */
async function whatToGet(argument: string | undefined, linkFile: string | undefined): Promise<string> {
  if (linkFile === undefined) {
    if (argument === undefined) throw new UsageError('missing <url|repo/id|…>, or --link-file FILE');
    return argument;
  }
  if (argument !== undefined) throw new UsageError('give the URL as an argument or with --link-file, not both');
  const held = linkFile === '-' ? await text(process.stdin) : await readFile(linkFile, 'utf8');
  return oneLine(held, linkFile === '-' ? 'standard input' : `--link-file ${linkFile}`);
}

/** The one line `source` holds, without surrounding blanks; anything else (empty, two links) is a usage error. */
export function oneLine(held: string, source: string): string {
  const lines = held.trim().split(/\r?\n/);
  if (lines[0] === '') throw new UsageError(`${source} is empty: it must hold the URL, on one line`);
  if (lines.length > 1)
    throw new UsageError(`${source} holds ${lines.length} lines: it must hold one URL, on one line`);
  return lines[0]!.trim();
}

/** Why a URL on a foreign origin got no key, and how to send it there if that origin is a gateway of yours. */
function keyWithheldNote(url: string, trusted: string): string {
  const { origin } = new URL(url);
  return `the API key is sent only to ${trusted}, not to ${origin}; if it is your gateway, give --url ${origin}`;
}

export const putCommand: Command = defineCommand({
  name: 'put',
  summary: 'upload a file with Content-Digest; large files in parallel parts, resuming a killed upload',
  description: `Files up to --threshold are sent in one streamed PUT with Content-Digest. Larger files use the multipart
API: --part-size parts, at most --concurrency in flight; the session is remembered under
~/.cache/arkvory/uploads (ARKVORY_UPLOAD_STATE_DIR; 0700, its files 0600; a symlink or another user's
directory there is invalid_argument; a state file that is not a regular file of at most 4 KiB is ignored,
a fresh session started; a full disk is no_space), so running the same command again after a kill sends
only the parts the gateway does not hold yet, then waits for the completion job. A full URL must be on the origin of --url or
ARKVORY_URL (the only place the key is sent): any other is refused, exit 2. The result is JSON on stdout.
${CONNECTION_NOTE}`,
  forms: [
    form({
      args: '<file> <repo/id|repo/name/version[/asset]|url>',
      options: {
        'content-type': {
          type: 'string',
          value: 'TYPE',
          description: 'the Content-Type downloads get (default: application/octet-stream)',
        },
        threshold: {
          type: 'string',
          value: '64M',
          description: 'larger files go through the multipart API (a byte count, or K, M, G; default 64M)',
        },
        'part-size': { type: 'string', value: '16M', description: 'the size of a multipart part (default 16M)' },
        concurrency: { type: 'string', value: '4', description: 'parts in flight at once, 1 to 99 (default 4)' },
        ...CONNECTION_OPTIONS,
      },
      async run(input, env) {
        const [file, target] = input.positionals;
        const key = sendableKey((await keyFrom(input.string('key-file'), env, true))!);
        const threshold = input.string('threshold');
        const partSize = input.string('part-size');
        const concurrencyText = input.string('concurrency');
        const concurrency = concurrencyText === undefined ? undefined : decimalInteger(concurrencyText);
        if (concurrency !== undefined || concurrencyText !== undefined)
          if (concurrency === undefined || concurrency < 1 || concurrency > MAX_UPLOAD_CONCURRENCY)
            throw new UsageError(`--concurrency must be 1 to ${MAX_UPLOAD_CONCURRENCY}`);
        const contentType = input.string('content-type');
        const stateDir = env[CLIENT_VARIABLES.uploadStateDir];
        const { baseUrlOf, KeyScope, upload } = await sdk();
        return reporting(() => {
          const base = gatewayUrl(input.string('url'), env);
          const url = httpUrl(baseUrlOf(target!, base), 'the URL to put to');
          // An upload cannot work without the key, and a URL may come from anyone: refuse rather
          // than send the key to a host that is not the gateway.
          if (!new KeyScope(base === undefined ? [] : [base]).allows(url))
            throw new UsageError(keyWithheldNote(url, 'the --url or ARKVORY_URL origin'));
          return upload({
            file: file!,
            url,
            key,
            ...(contentType !== undefined ? { contentType } : {}),
            ...(threshold !== undefined ? { multipartThreshold: parseSize(threshold) } : {}),
            ...(partSize !== undefined ? { partSize: parseSize(partSize) } : {}),
            ...(concurrency !== undefined ? { concurrency } : {}),
            ...(stateDir ? { stateDir } : {}),
          });
        });
      },
    }),
  ],
});

export const presignCommand: Command = defineCommand({
  name: 'presign',
  summary: 'make a link to an artifact that needs no header (browsers, CDNs, download managers)',
  description: `Prints JSON with the link (on --url: its origin, and any path prefix a proxy strips before the gateway,
as https://host/prefix/), its expiry and the methods it allows (GET, HEAD). The
link is bound to that one target and to the key that made it: revoking the key, removing its grant or
disabling its principal kills the link within 2 s. --expires defaults to 1h, at most the gateway's
ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS (default 7d).
${CONNECTION_NOTE}`,
  forms: [
    form({
      args: '<repo> <artifact|package/version[/asset]>',
      options: {
        expires: {
          type: 'string',
          value: '1h',
          description: 'how long the link works: seconds, or 90s, 15m, 12h, 7d (default 1h)',
        },
        ...CONNECTION_OPTIONS,
      },
      async run(input, env) {
        const [repo, target] = input.positionals;
        const key = sendableKey((await keyFrom(input.string('key-file'), env, true))!);
        const base = gatewayUrl(input.string('url'), env);
        if (!base) throw new UsageError('no gateway: give --url or set ARKVORY_URL');
        const expires = input.string('expires');
        const expiresInSeconds = expires === undefined ? undefined : parseDuration(expires);
        const { presign, targetOf } = await sdk();
        return reporting(async () => {
          const { basePath } = targetOf(repo!, target!.split('/'));
          return presign({
            url: `${base.replace(/\/+$/, '')}${basePath}`,
            key,
            ...(expiresInSeconds !== undefined ? { expiresInSeconds } : {}),
          });
        });
      },
    }),
  ],
});

/**
 * The file `arkvory get` writes without `-o`: the URL's last path segment, decoded, and never a
 * path (a link may come from a stranger: `..%2F..%2F.bashrc` must not leave the directory).
 */
export function outputNameOf(url: string): string {
  const segment =
    new URL(url).pathname
      .replace(/\/content$/, '')
      .split('/')
      .pop() ?? '';
  let name: string;
  try {
    name = decodeURIComponent(segment);
  } catch {
    name = segment;
  }
  const base = path.basename(name.replaceAll('\\', '/'));
  if (base === '' || base === '.' || base === '..')
    throw new UsageError(`the URL names no file to write (${JSON.stringify(segment)}); give -o FILE`);
  // A NUL no file name holds; a control character (an escape sequence, a line break) would be
  // replayed to the terminal of whoever lists the directory; and a name longer than a file
  // system's 255 bytes fails only after the lock. Not quoted back: it may be anything.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  if (/[\x00-\x1f\x7f-\x9f]/.test(base) || Buffer.byteLength(base) > 255)
    throw new UsageError(
      'the file name the URL ends with holds a control character or is longer than 255 bytes; give -o FILE',
    );
  return base;
}
