/**
 * An answer's status and headers as real curl received them over HTTPS (HTTP/1.1 or HTTP/2), the
 * body discarded: for checks of headers every answer carries (Strict-Transport-Security).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface CurlHead {
  readonly status: number;
  /** `1.1` or `2`, as curl reports it. */
  readonly version: string;
  /** Names in lower case; a header sent twice has its values joined with `, `. */
  readonly headers: Readonly<Record<string, string>>;
  /** How many times each name (lower case) was sent. */
  readonly counts: Readonly<Record<string, number>>;
}

/** `curl --http<version> --cacert <caFile> -D - <url>` (with `args`), its last head parsed. */
export async function curlHead(
  url: string,
  caFile: string,
  version: '1.1' | '2',
  args: readonly string[] = [],
): Promise<CurlHead> {
  const { stdout } = await run(
    'curl',
    [
      '-sS',
      `--http${version}`,
      '--cacert',
      caFile,
      '-o',
      '/dev/null',
      '-D',
      '-',
      '-w',
      '%{http_version}',
      ...args,
      url,
    ],
    { timeout: 20_000 },
  );
  // `-w` prints after the heads; a 1xx head (100 Continue) comes before the last one.
  const end = stdout.lastIndexOf('\n');
  const heads = stdout
    .slice(0, end)
    .trim()
    .split(/\r?\n\r?\n/);
  const [statusLine, ...lines] = heads.at(-1)!.split(/\r?\n/);
  const headers: Record<string, string> = {};
  const counts: Record<string, number> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return { status: Number(statusLine!.split(' ')[1]), version: stdout.slice(end + 1), headers, counts };
}
