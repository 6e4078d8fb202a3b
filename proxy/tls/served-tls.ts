/**
 * The certificate a TLS listener serves, read from ARKVORY_TLS_CERT_FILE / ARKVORY_TLS_KEY_FILE
 * (and the client CA of ARKVORY_TLS_CLIENT_CA_FILE), and reloaded without a restart: on a change in
 * the files' directories (fs.watch, debounced: a cert and a key are two renames), on a poll of their
 * stat (fs.watch misses changes on some file systems and bind mounts), and on SIGHUP. A reload
 * replaces the secure context of every attached server (`setSecureContext`), so new handshakes
 * get the new pair while open connections keep theirs. A broken new pair (unreadable, key not
 * matching, expired) is rejected: the served pair stays, one error line is logged and a failure is
 * counted. At start the same checks refuse to start (StartupError).
 *
 * The decisions are pure (certificate-pair.ts); this file reads files, watches and swaps.
 */
import { randomBytes, X509Certificate } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import type tls from 'node:tls';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import { FileReloadTrigger, SerialReload } from '../config/file-reload-trigger.ts';
import { StartupError } from '../server/startup-failure.ts';
import {
  checkCertificatePair,
  decideReload,
  type PairCheck,
  type ServedCertificate,
  splitPemChain,
} from './certificate-pair.ts';
import {
  ALPN_PROTOCOLS,
  type ClientCertMode,
  ECDH_CURVES,
  INTERMEDIATE_CIPHERS,
  SESSION_TIMEOUT_SECONDS,
  TLS_MAX_VERSION,
  TLS_MIN_VERSION,
} from './tls-profile.ts';

/** The TLS slice of the configuration (proxy/config). */
export interface TlsListenerConfig {
  readonly certFile: string;
  readonly keyFile: string;
  /** CAs whose client certificates are verified; undefined = no client certificates. */
  readonly clientCaFile: string | undefined;
  readonly clientCert: ClientCertMode;
}

export interface ServedTlsOptions {
  readonly clock: Clock;
  readonly log: Logger;
  /** Wait after a change event before reading, so a cert and key renamed one after the other are read together. */
  readonly debounceMs?: number;
  /** How often the files' stat is compared, for file systems where fs.watch says nothing. */
  readonly pollIntervalMs?: number;
}

/** What a reload did, for logs and tests. */
export type ReloadOutcome = 'swapped' | 'unchanged' | 'rejected';

interface ReadPair {
  check: PairCheck;
  cert: Buffer;
  key: Buffer;
  clientCa: Buffer | undefined;
}

export class ServedTls {
  readonly #config: TlsListenerConfig;
  readonly #options: ServedTlsOptions;
  readonly #servers = new Set<tls.Server>();
  /**
   * Session ticket keys kept across certificate reloads: a client resuming after a rotation keeps
   * its session (a context made afresh would draw new keys and force full handshakes on everyone).
   */
  readonly #ticketKeys = randomBytes(48);
  #served: ServedCertificate;
  #pem: { cert: Buffer; key: Buffer; clientCa: Buffer | undefined };
  #reloadFailures = 0;
  #lastError: string | undefined;
  readonly #trigger: FileReloadTrigger;
  readonly #serial = new SerialReload((trigger) => this.#reloadOnce(trigger));

  private constructor(config: TlsListenerConfig, options: ServedTlsOptions, first: ReadPair) {
    this.#config = config;
    this.#options = options;
    if (!first.check.ok) throw new Error('unreachable: a rejected pair is never served');
    this.#served = first.check.certificate;
    this.#pem = { cert: first.cert, key: first.key, clientCa: first.clientCa };
    this.#trigger = new FileReloadTrigger({
      log: options.log,
      files: [config.certFile, config.keyFile, config.clientCaFile].filter((f): f is string => f !== undefined),
      signature: () => statSignature(config),
      reload: (trigger) => this.reload(trigger),
      messages: {
        hangup: 'reloading the TLS certificate',
        watchFailed: 'TLS file watch failed; polling only',
        cannotWatch: 'cannot watch the TLS files directory; polling only',
      },
      debounceMs: options.debounceMs,
      pollIntervalMs: options.pollIntervalMs,
    });
  }

  /** Reads and checks the pair; a broken pair refuses the start with the reason. */
  static async open(config: TlsListenerConfig, options: ServedTlsOptions): Promise<ServedTls> {
    const first = await readPair(config, options.clock.wallMs());
    if (!first.check.ok) throw new StartupError(`TLS: ${first.check.reason}`);
    const served = new ServedTls(config, options, first);
    await served.#trigger.markRead();
    return served;
  }

  /** The leaf served to new handshakes now. */
  get certificate(): ServedCertificate {
    return this.#served;
  }

  /** Rejected reloads since start (arkvory_tls_reload_failures_total). */
  get reloadFailures(): number {
    return this.#reloadFailures;
  }

  get lastError(): string | undefined {
    return this.#lastError;
  }

  get clientCertMode(): ClientCertMode {
    return this.#config.clientCaFile === undefined ? 'off' : this.#config.clientCert;
  }

  /** Options for `https.createServer` (or, later, `http2.createSecureServer`). */
  serverOptions(): tls.TlsOptions {
    const mode = this.clientCertMode;
    return {
      ...this.#contextOptions(),
      ALPNProtocols: [...ALPN_PROTOCOLS],
      // Asked for, never enforced in the handshake: a missing or unverifiable certificate becomes a
      // 401 with its reason in the log (proxy/gates/auth-gate.ts), not a handshake alert a client
      // cannot explain.
      requestCert: mode !== 'off',
      rejectUnauthorized: false,
    };
  }

  #contextOptions(): tls.SecureContextOptions & { ticketKeys: Buffer } {
    return {
      cert: this.#pem.cert,
      key: this.#pem.key,
      ...(this.#pem.clientCa ? { ca: this.#pem.clientCa } : {}),
      minVersion: TLS_MIN_VERSION,
      maxVersion: TLS_MAX_VERSION,
      ciphers: INTERMEDIATE_CIPHERS,
      ecdhCurve: ECDH_CURVES,
      honorCipherOrder: true,
      sessionTimeout: SESSION_TIMEOUT_SECONDS,
      // One id for every process of a deployment's role: session ids stay meaningful across contexts.
      sessionIdContext: 'arkvory',
      ticketKeys: this.#ticketKeys,
    };
  }

  /** Swaps `server`'s context on every later reload. */
  attach(server: tls.Server): void {
    this.#servers.add(server);
  }

  /** Starts watching the files and SIGHUP. */
  start(): void {
    // The state was taken at open, so the trigger sets up its watches and poll without waiting.
    void this.#trigger.start();
  }

  close(): void {
    this.#trigger.close();
  }

  /** Reads the files again and serves them if they are a valid new pair. One reload at a time. */
  reload(trigger: string): Promise<ReloadOutcome> {
    return this.#serial.reload(trigger);
  }

  async #reloadOnce(trigger: string): Promise<ReloadOutcome> {
    await this.#trigger.markRead();
    const read = await readPair(this.#config, this.#options.clock.wallMs());
    const caChanged = !sameBytes(read.clientCa, this.#pem.clientCa);
    const decision = decideReload(this.#served, read.check, caChanged);
    const log = this.#options.log;
    if (decision.action === 'unchanged') return 'unchanged';
    if (decision.action === 'reject') {
      this.#reloadFailures++;
      this.#lastError = decision.reason;
      log.error(
        {
          code: 'tls_reload_failed',
          trigger,
          reason: decision.reason,
          served: { serial: this.#served.serial, notAfter: new Date(this.#served.notAfterMs).toISOString() },
        },
        `TLS certificate not reloaded: ${decision.reason}; still serving serial ${this.#served.serial}`,
      );
      return 'rejected';
    }
    const previous = this.#served;
    this.#pem = { cert: read.cert, key: read.key, clientCa: read.clientCa };
    this.#served = decision.certificate;
    this.#lastError = undefined;
    const options = this.#contextOptions();
    for (const server of this.#servers) server.setSecureContext(options);
    log.info(
      {
        trigger,
        serial: decision.certificate.serial,
        previousSerial: previous.serial,
        notAfter: new Date(decision.certificate.notAfterMs).toISOString(),
      },
      'TLS certificate reloaded',
    );
    return 'swapped';
  }
}

async function readPair(config: TlsListenerConfig, nowMs: number): Promise<ReadPair> {
  const fail = (reason: string): ReadPair => ({
    check: { ok: false, reason },
    cert: Buffer.alloc(0),
    key: Buffer.alloc(0),
    clientCa: undefined,
  });
  let cert: Buffer;
  let key: Buffer;
  let clientCa: Buffer | undefined;
  try {
    cert = await readFile(config.certFile);
  } catch (err) {
    return fail(`cannot read ARKVORY_TLS_CERT_FILE ${config.certFile} (${(err as NodeJS.ErrnoException).code ?? err})`);
  }
  try {
    key = await readFile(config.keyFile);
  } catch (err) {
    return fail(`cannot read ARKVORY_TLS_KEY_FILE ${config.keyFile} (${(err as NodeJS.ErrnoException).code ?? err})`);
  }
  if (config.clientCaFile !== undefined) {
    try {
      clientCa = await readFile(config.clientCaFile);
    } catch (err) {
      return fail(
        `cannot read ARKVORY_TLS_CLIENT_CA_FILE ${config.clientCaFile} (${(err as NodeJS.ErrnoException).code ?? err})`,
      );
    }
    const problem = checkCaBundle(clientCa.toString());
    if (problem) return fail(`ARKVORY_TLS_CLIENT_CA_FILE ${config.clientCaFile}: ${problem}`);
  }
  return { check: checkCertificatePair(cert, key, nowMs), cert, key, clientCa };
}

/** Undefined when the bundle holds at least one parsable certificate and nothing unparsable. */
function checkCaBundle(pem: string): string | undefined {
  const certs = splitPemChain(pem);
  if (certs.length === 0) return 'holds no PEM certificate';
  for (const c of certs) {
    try {
      new X509Certificate(c);
    } catch (err) {
      return `a certificate cannot be parsed (${(err as Error).message})`;
    }
  }
  return undefined;
}

function sameBytes(a: Buffer | undefined, b: Buffer | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.equals(b);
}

/** Inode, size and mtime of every file (stat follows symlinks, as a secret volume's are). */
async function statSignature(config: TlsListenerConfig): Promise<string> {
  const parts: string[] = [];
  for (const file of [config.certFile, config.keyFile, config.clientCaFile]) {
    if (file === undefined) continue;
    try {
      const s = await stat(file);
      parts.push(`${s.ino}:${s.size}:${s.mtimeMs}`);
    } catch {
      parts.push('missing');
    }
  }
  return parts.join('|');
}

/** The served certificate of a role's listener, read and checked; undefined without TLS configured. */
export async function openListenerTls(
  config: TlsListenerConfig | undefined,
  options: ServedTlsOptions,
): Promise<ServedTls | undefined> {
  if (!config) return undefined;
  const served = await ServedTls.open(config, options);
  const c = served.certificate;
  options.log.info(
    {
      serial: c.serial,
      subject: c.subject,
      notAfter: new Date(c.notAfterMs).toISOString(),
      chain: c.chainLength,
      clientCert: served.clientCertMode,
    },
    'serving TLS',
  );
  return served;
}
