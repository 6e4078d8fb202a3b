/**
 * The certificate a TLS listener serves, read from ARKVORY_TLS_CERT_FILE / ARKVORY_TLS_KEY_FILE
 * (and the client CA of ARKVORY_TLS_CLIENT_CA_FILE), and reloaded without a restart: on a change in
 * the files' directories (fs.watch, debounced: a cert and a key are two renames), on a poll of their
 * stat (fs.watch misses changes on some file systems and bind mounts), and on SIGHUP. A reload
 * replaces the secure context of every attached server (`setSecureContext`), so new handshakes
 * get the new pair while open connections keep theirs. The pair and the client CA are judged
 * apart: a broken one (unreadable, key not matching, expired, refused by OpenSSL) is not served and
 * the other still is; one error line is logged and one failure counted per broken state of the
 * files. A changed client CA also draws new session ticket keys, and open connections are checked
 * against it per request (peer-certificate.ts). At start the same checks refuse to start (StartupError).
 *
 * The decisions are pure (certificate-pair.ts); this file reads files, watches and swaps.
 */
import { createHash, randomBytes, X509Certificate } from 'node:crypto';
import { stat } from 'node:fs/promises';
import tls from 'node:tls';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import { FileReloadTrigger, SerialReload } from '../config/file-reload-trigger.ts';
import { StartupError } from '../server/startup-failure.ts';
import {
  checkCertificatePair,
  decideReload,
  keyFileExposure,
  type PairCheck,
  type PartCheck,
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
import { readTlsFile } from './tls-file.ts';

/** The TLS slice of the configuration (proxy/config). */
export interface TlsListenerConfig {
  readonly certFile: string;
  readonly keyFile: string;
  /** CAs whose client certificates are verified; undefined = no client certificates. */
  readonly clientCaFile: string | undefined;
  readonly clientCert: ClientCertMode;
  /** The Strict-Transport-Security value every answer carries (proxy/tls/hsts.ts); undefined = none. */
  readonly hsts?: string | undefined;
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

/** The bytes served now. */
interface ServedFiles {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly clientCa: Buffer | undefined;
}

/** The CAs a client certificate must chain to now; `generation` moves when they change. */
export interface ClientTrust {
  readonly generation: number;
  /** SHA-256 fingerprints (`AA:BB:…`) of the certificates in ARKVORY_TLS_CLIENT_CA_FILE. */
  readonly anchors: ReadonlySet<string>;
  /** Those certificates: the ones that may issue a principal's certificate (proxy/tls/client-leaf.ts). */
  readonly certificates: readonly X509Certificate[];
  /**
   * The last generation whose change took a CA out (-1: none yet): only such a change can void a
   * verdict an open connection's handshake made (proxy/tls/peer-certificate.ts).
   */
  readonly lastRemovalGeneration: number;
}

export class ServedTls {
  readonly #config: TlsListenerConfig;
  readonly #options: ServedTlsOptions;
  readonly #servers = new Set<tls.Server>();
  /**
   * Session ticket keys kept across certificate reloads: a client resuming after a rotation keeps
   * its session (a context made afresh would draw new keys and force full handshakes on everyone).
   * Drawn again when the client CA changes: a resumed session keeps the verdict of its first
   * handshake, which a CA taken out of trust must not outlive.
   */
  #ticketKeys = randomBytes(48);
  #served: ServedCertificate;
  #files: ServedFiles;
  #clientTrust: ClientTrust;
  #reloadFailures = 0;
  #lastError: string | undefined;
  /** The failure last reported (reason and the bytes that caused it): the same one is not reported twice. */
  #reported: string | undefined;
  readonly #trigger: FileReloadTrigger;
  readonly #serial = new SerialReload((trigger) => this.#reloadOnce(trigger));

  private constructor(
    config: TlsListenerConfig,
    options: ServedTlsOptions,
    files: ServedFiles,
    certificate: ServedCertificate,
  ) {
    this.#config = config;
    this.#options = options;
    this.#served = certificate;
    this.#files = files;
    this.#clientTrust = { generation: 0, ...caCertificates(files.clientCa), lastRemovalGeneration: -1 };
    this.#trigger = new FileReloadTrigger({
      log: options.log,
      files: [config.certFile, config.keyFile, config.clientCaFile].filter((f): f is string => f !== undefined),
      signature: () => statSignature(config),
      reload: (trigger) => this.reload(trigger),
      // A standing failure is tried again on each poll: a renewal not yet valid by this host's clock
      // (a CA's clock a little ahead) becomes valid with no further change to its files.
      onQuietPoll: () => (this.#lastError === undefined ? undefined : this.reload('retry')),
      messages: {
        hangup: 'reloading the TLS certificate',
        watchFailed: 'TLS file watch failed; polling only',
        cannotWatch: 'cannot watch the TLS files directory; polling only',
      },
      debounceMs: options.debounceMs,
      pollIntervalMs: options.pollIntervalMs,
    });
  }

  /** Reads and checks the pair and the client CA; a broken one refuses the start with the reason. */
  static async open(config: TlsListenerConfig, options: ServedTlsOptions): Promise<ServedTls> {
    const read = await readFiles(config);
    if (typeof read.pair === 'string') throw new StartupError(`TLS: ${read.pair}`);
    if (typeof read.clientCa === 'string') throw new StartupError(`TLS: ${read.clientCa}`);
    const pair = checkPair(read.pair.cert, read.pair.key, options.clock.wallMs());
    if (!pair.ok) throw new StartupError(`TLS: ${pair.reason}`);
    const caProblem = read.clientCa && checkClientCa(config, read.clientCa);
    if (caProblem) throw new StartupError(`TLS: ${caProblem}`);
    const served = new ServedTls(config, options, { ...read.pair, clientCa: read.clientCa }, pair.certificate);
    await served.#trigger.markRead();
    await served.#warnIfKeyExposed();
    return served;
  }

  /** The leaf served to new handshakes now. */
  get certificate(): ServedCertificate {
    return this.#served;
  }

  /** The client CAs trusted now (proxy/tls/peer-certificate.ts checks open connections against them). */
  get clientTrust(): ClientTrust {
    return this.#clientTrust;
  }

  /** Rejected reloads since start (arkvory_tls_reload_failures_total): each broken state of the files once. */
  get reloadFailures(): number {
    return this.#reloadFailures;
  }

  get lastError(): string | undefined {
    return this.#lastError;
  }

  get clientCertMode(): ClientCertMode {
    return this.#config.clientCaFile === undefined ? 'off' : this.#config.clientCert;
  }

  /** The Strict-Transport-Security value every answer of its listeners carries; undefined = none. */
  get hsts(): string | undefined {
    return this.#config.hsts;
  }

  /** Options for `https.createServer` (or, later, `http2.createSecureServer`). */
  serverOptions(): tls.TlsOptions {
    const mode = this.clientCertMode;
    return {
      ...this.#contextOptions(this.#files),
      ALPNProtocols: [...ALPN_PROTOCOLS],
      // Asked for, never enforced in the handshake: a missing or unverifiable certificate becomes a
      // 401 with its reason in the log (proxy/gates/auth-gate.ts), not a handshake alert a client
      // cannot explain.
      requestCert: mode !== 'off',
      rejectUnauthorized: false,
    };
  }

  #contextOptions(files: ServedFiles): tls.SecureContextOptions & { ticketKeys: Buffer } {
    return {
      ...profileOptions(),
      cert: files.cert,
      key: files.key,
      ...(files.clientCa ? { ca: files.clientCa } : {}),
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

  /** Reads the files again and serves what of them is valid and new. One reload at a time. */
  reload(trigger: string): Promise<ReloadOutcome> {
    return this.#serial.reload(trigger);
  }

  /** Never rejects (the watch and SIGHUP callers do not wait): anything unforeseen is a rejected reload. */
  async #reloadOnce(trigger: string): Promise<ReloadOutcome> {
    try {
      return await this.#reloadFiles(trigger);
    } catch (err) {
      this.#reportFailure(trigger, [`the reload failed (${(err as Error).message})`], 'unforeseen');
      return 'rejected';
    }
  }

  async #reloadFiles(trigger: string): Promise<ReloadOutcome> {
    await this.#trigger.markRead();
    const read = await readFiles(this.#config);
    const served = this.#files;
    let pair: PartCheck<ServedCertificate>;
    if (typeof read.pair === 'string') pair = { state: 'broken', reason: read.pair };
    else if (read.pair.cert.equals(served.cert) && read.pair.key.equals(served.key)) pair = { state: 'same' };
    else {
      const check = checkPair(read.pair.cert, read.pair.key, this.#options.clock.wallMs());
      pair = check.ok ? { state: 'new', value: check.certificate } : { state: 'broken', reason: check.reason };
    }
    let clientCa: PartCheck<Buffer | undefined>;
    if (typeof read.clientCa === 'string') clientCa = { state: 'broken', reason: read.clientCa };
    else if (sameBytes(read.clientCa, served.clientCa)) clientCa = { state: 'same' };
    else {
      const problem = read.clientCa && checkClientCa(this.#config, read.clientCa);
      clientCa = problem ? { state: 'broken', reason: problem } : { state: 'new', value: read.clientCa };
    }
    const decision = decideReload(pair, clientCa);
    if (decision.action === 'unchanged') {
      this.#reported = undefined;
      this.#lastError = undefined;
      return 'unchanged';
    }
    const failed = read.bytesHash;
    if (decision.action === 'reject') {
      this.#reportFailure(trigger, decision.failures, failed);
      return 'rejected';
    }
    const next: ServedFiles = {
      cert: pair.state === 'new' && typeof read.pair !== 'string' ? read.pair.cert : served.cert,
      key: pair.state === 'new' && typeof read.pair !== 'string' ? read.pair.key : served.key,
      clientCa: clientCa.state === 'new' ? clientCa.value : served.clientCa,
    };
    if (decision.clientCa) this.#ticketKeys = randomBytes(48);
    const options = this.#contextOptions(next);
    // Both parts passed OpenSSL on their own; built together once more before any server takes them.
    try {
      tls.createSecureContext(options);
    } catch (err) {
      this.#reportFailure(trigger, [`OpenSSL refuses the new files (${(err as Error).message})`], failed);
      return 'rejected';
    }
    const previous = this.#served;
    this.#files = next;
    if (decision.certificate) this.#served = decision.certificate;
    if (decision.clientCa) this.#clientTrust = nextTrust(this.#clientTrust, caCertificates(next.clientCa));
    for (const server of this.#servers) server.setSecureContext(options);
    this.#options.log.info(
      {
        trigger,
        serial: this.#served.serial,
        previousSerial: previous.serial,
        notAfter: new Date(this.#served.notAfterMs).toISOString(),
        clientCaChanged: decision.clientCa,
      },
      decision.certificate ? 'TLS certificate reloaded' : 'TLS client CA reloaded',
    );
    if (decision.certificate) await this.#warnIfKeyExposed();
    if (decision.failures.length > 0) this.#reportFailure(trigger, decision.failures, failed);
    else {
      this.#reported = undefined;
      this.#lastError = undefined;
    }
    return 'swapped';
  }

  /**
   * A warning when the key file is readable by every account (served all the same: a Kubernetes
   * secret is 0644 unless its volume says otherwise, and refusing would take the listener down).
   */
  async #warnIfKeyExposed(): Promise<void> {
    const file = this.#config.keyFile;
    let mode: number;
    try {
      mode = (await stat(file)).mode;
    } catch {
      return;
    }
    const exposure = keyFileExposure(mode);
    if (exposure === undefined) return;
    this.#options.log.warn(
      { code: 'tls_key_readable', file, mode: (mode & 0o777).toString(8).padStart(4, '0') },
      `ARKVORY_TLS_KEY_FILE ${file} is ${exposure}: give it mode 0600, or 0640 with the group of this process's account (a Kubernetes secret volume: defaultMode 0440 and the pod's fsGroup)`,
    );
  }

  /** One error line and one count per broken state of the files; the same state again is not news. */
  #reportFailure(trigger: string, failures: readonly string[], state: string): void {
    const reason = failures.join('; ');
    this.#lastError = reason;
    const key = `${state}\u0000${reason}`;
    if (key === this.#reported) return;
    this.#reported = key;
    this.#reloadFailures++;
    const served = this.#served;
    this.#options.log.error(
      {
        code: 'tls_reload_failed',
        trigger,
        reason,
        served: { serial: served.serial, notAfter: new Date(served.notAfterMs).toISOString() },
      },
      `TLS files not reloaded: ${reason}; still serving serial ${served.serial}`,
    );
  }
}

/** The listener profile every context is made with (tls-profile.ts). */
function profileOptions(): tls.SecureContextOptions {
  return {
    minVersion: TLS_MIN_VERSION,
    maxVersion: TLS_MAX_VERSION,
    ciphers: INTERMEDIATE_CIPHERS,
    ecdhCurve: ECDH_CURVES,
    honorCipherOrder: true,
    sessionTimeout: SESSION_TIMEOUT_SECONDS,
    // One id for every process of a deployment's role: session ids stay meaningful across contexts.
    sessionIdContext: 'arkvory',
  };
}

/**
 * The pair's own checks, then OpenSSL's: a chain whose later certificates are damaged, or a key
 * too weak for OpenSSL's security level, passes the first and fails only when a context is made.
 */
function checkPair(cert: Buffer, key: Buffer, nowMs: number): PairCheck {
  const check = checkCertificatePair(cert, key, nowMs);
  if (!check.ok) return check;
  try {
    tls.createSecureContext({ ...profileOptions(), cert, key });
  } catch (err) {
    return { ok: false, reason: `OpenSSL refuses the certificate chain or key (${(err as Error).message})` };
  }
  return check;
}

/** Undefined when the client CA bundle is usable, else why not. */
function checkClientCa(config: TlsListenerConfig, ca: Buffer): string | undefined {
  const problem = checkCaBundle(ca.toString());
  if (problem) return `ARKVORY_TLS_CLIENT_CA_FILE ${config.clientCaFile}: ${problem}`;
  try {
    tls.createSecureContext({ ca });
  } catch (err) {
    return `ARKVORY_TLS_CLIENT_CA_FILE ${config.clientCaFile}: OpenSSL refuses it (${(err as Error).message})`;
  }
  return undefined;
}

interface ReadFiles {
  /** The pair's bytes, or why they cannot be read. */
  readonly pair: { cert: Buffer; key: Buffer } | string;
  /** The client CA's bytes (undefined when none is configured), or why they cannot be read. */
  readonly clientCa: Buffer | undefined | string;
  /** A digest of everything read: a failure is reported once per state of the files. */
  readonly bytesHash: string;
}

async function readFiles(config: TlsListenerConfig): Promise<ReadFiles> {
  // At most 1 MiB each, regular files only (tls-file.ts): a link to /dev/zero is not read without end.
  const cert = await readTlsFile(config.certFile, 'ARKVORY_TLS_CERT_FILE');
  const key = await readTlsFile(config.keyFile, 'ARKVORY_TLS_KEY_FILE');
  const clientCa =
    config.clientCaFile === undefined
      ? undefined
      : await readTlsFile(config.clientCaFile, 'ARKVORY_TLS_CLIENT_CA_FILE');
  const hash = createHash('sha256');
  for (const part of [cert, key, clientCa]) hash.update(part === undefined ? '-' : part).update('\u0000');
  return {
    pair: typeof cert === 'string' ? cert : typeof key === 'string' ? key : { cert, key },
    clientCa,
    bytesHash: hash.digest('hex'),
  };
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

type Anchors = Pick<ClientTrust, 'anchors' | 'certificates'>;

/** The trust after a change of the client CA file to `next`: a new generation, a removal noted. */
function nextTrust(previous: ClientTrust, next: Anchors): ClientTrust {
  const generation = previous.generation + 1;
  const removed = [...previous.anchors].some((fingerprint) => !next.anchors.has(fingerprint));
  return { generation, ...next, lastRemovalGeneration: removed ? generation : previous.lastRemovalGeneration };
}

function caCertificates(bundle: Buffer | undefined): Anchors {
  const certificates = bundle ? splitPemChain(bundle.toString()).map((pem) => new X509Certificate(pem)) : [];
  return { anchors: new Set(certificates.map((c) => c.fingerprint256)), certificates };
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
      hsts: served.hsts,
    },
    'serving TLS',
  );
  return served;
}
