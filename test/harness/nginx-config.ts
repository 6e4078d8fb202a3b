import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The main configuration of every nginx that tests and benchmarks start (as `nginx -p <prefix> -c <it>`):
 * in the foreground, its pid file and error log under the prefix and every temporary path under a
 * directory of the run (nginx's built-in ones are under /var/lib/nginx, shared by every run or not
 * writable at all). Each caller gives its own `http` block's directives.
 */

export type NginxLogLevel = 'debug' | 'info' | 'notice' | 'warn' | 'error' | 'crit' | 'alert' | 'emerg';

export interface NginxMainConfigOptions {
  /** nginx's prefix directory: nginx.pid and error.log go there. */
  readonly prefix: string;
  /** The proxy, fastcgi, uwsgi and scgi temporary paths (`<it>/proxy`, ...), and the request bodies' unless `bodyTempPath`. */
  readonly tempDir: string;
  /** The request bodies' temporary path when not `<tempDir>/body`. */
  readonly bodyTempPath?: string;
  /** 1 unless given. */
  readonly workerProcesses?: number | 'auto';
  /** 512 unless given. */
  readonly workerConnections?: number;
  /** The error log's level; nginx's own (error) unless given. */
  readonly errorLogLevel?: NginxLogLevel;
  /**
   * `user root;`, so the workers read and write files the run made whatever their modes. By default
   * when running as root: nginx honours `user` only then, and warns of it otherwise.
   */
  readonly userRoot?: boolean;
  /** The `http` block's own directives (log formats, servers, includes). */
  readonly http: string;
}

/** The text of the nginx.conf these options describe; `http` goes in indented by two spaces. */
export function nginxMainConfig(options: NginxMainConfigOptions): string {
  const { prefix, tempDir } = options;
  const userRoot = options.userRoot ?? process.getuid?.() === 0;
  const level = options.errorLogLevel ? ` ${options.errorLogLevel}` : '';
  const body = options.http
    .replace(/^\n+|\s+$/g, '')
    .split('\n')
    .map((line) => (line.trim() ? `  ${line}` : ''))
    .join('\n');
  return `${userRoot ? 'user root;\n' : ''}worker_processes ${options.workerProcesses ?? 1};
daemon off;
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log${level};
events { worker_connections ${options.workerConnections ?? 512}; }
http {
  client_body_temp_path ${options.bodyTempPath ?? `${tempDir}/body`}; proxy_temp_path ${tempDir}/proxy; fastcgi_temp_path ${tempDir}/fastcgi; uwsgi_temp_path ${tempDir}/uwsgi; scgi_temp_path ${tempDir}/scgi;
${body}
}
`;
}

/**
 * Writes `<dir>/nginx.conf` for an nginx whose prefix is `dir`, its temporary paths under
 * `<dir>/temp` (made here), its error log at warn; returns the file's path.
 */
export async function writeNginxConf(
  dir: string,
  options: Omit<NginxMainConfigOptions, 'prefix' | 'tempDir' | 'errorLogLevel'>,
): Promise<string> {
  const tempDir = path.join(dir, 'temp');
  await mkdir(tempDir, { recursive: true });
  const conf = path.join(dir, 'nginx.conf');
  await writeFile(conf, nginxMainConfig({ prefix: dir, tempDir, errorLogLevel: 'warn', ...options }));
  return conf;
}
