/**
 * Secrets rotated without a restart: on SIGHUP, on a change in a secret file's directory (fs.watch,
 * debounced: a key id and its secret are two writes) and on a poll of the files' stat (fs.watch
 * misses changes on some file systems and bind mounts), every `…_FILE` secret is read again.
 *
 * A new value is taken only when it is sound: the file reads (readSecretFile's checks), the
 * configuration it makes passes the same validation as at start (loadConfig), and the server it is
 * for accepts it (a `SecretVerifier`: a PostgreSQL login, a signed S3 request). Otherwise the
 * previous value stays in use, one warning names the variable and the reason (never the value) and
 * a failure is counted, once per state of the file and reason (a file change event and the SIGHUP
 * that follows it are one failure); while a failure stands, each poll tries again (a password
 * changed on the server after its file is then picked up).
 *
 * Consumers read `config` when they open a connection or sign a request, so new connections and
 * requests use the new secret while open ones finish with theirs.
 */
import { stat } from 'node:fs/promises';
import type { Logger } from 'pino';
import { ConfigError, loadConfig } from './config.ts';
import { FileReloadTrigger, SerialReload } from './file-reload-trigger.ts';
import { readSecretFile, SECRET_FILE_VARIABLES } from './secret-files.ts';
import type { Config } from './types.ts';

/** Checks a new credential with the server it is for, before anything uses it. */
export interface SecretVerifier {
  /** What is checked, for the log ("the PostgreSQL login"). */
  readonly what: string;
  /** The variables whose change this verifier checks (those their `…_FILE` forms fill). */
  readonly variables: readonly string[];
  /** Whether `next` differs from `current` in what this verifier checks. */
  changed(current: Config, next: Config): boolean;
  /** Resolves when the server accepts `next`'s credential; throws (a message without the secret) otherwise. */
  verify(next: Config): Promise<void>;
}

/** What the process read at start: the environment and each secret file's value by path. */
export interface StartSecrets {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly reads: ReadonlyMap<string, string>;
  readonly cwd?: string | undefined;
}

export interface SecretRotationOptions {
  readonly log: Logger;
  readonly verifiers?: readonly SecretVerifier[];
  /** The file reader (tests count or fail reads); default readSecretFile. */
  readonly read?: (file: string) => string;
  /** Wait after a change event before reading, so files written one after the other are read together. */
  readonly debounceMs?: number;
  /** How often the files' stat is compared (and a standing failure retried). */
  readonly pollIntervalMs?: number;
}

export interface RotationFailure {
  /** The variable the file fills (`ARKVORY_DATABASE_PASSWORD`), never its value. */
  readonly secret: string;
  readonly reason: string;
}

export interface RotationOutcome {
  /** Variables now in use with a new value. */
  readonly rotated: readonly string[];
  readonly failed: readonly RotationFailure[];
}

interface FileVariable {
  readonly file: string;
  readonly fills: string;
  readonly path: string;
}

export class SecretRotation {
  readonly #start: StartSecrets;
  readonly #options: SecretRotationOptions;
  readonly #files: readonly FileVariable[];
  /** The value in use, by file path. */
  #accepted: Map<string, string>;
  #config: Config;
  readonly #rotations = new Map<string, number>();
  readonly #failures = new Map<string, number>();
  /** The failure standing per variable, as its file's state and reason (cleared when the file is sound again). */
  readonly #standing = new Map<string, string>();
  readonly #listeners: Array<(previous: Config, next: Config, rotated: readonly string[]) => void> = [];
  readonly #trigger: FileReloadTrigger;
  readonly #serial = new SerialReload((trigger) => this.#reloadOnce(trigger));

  constructor(config: Config, start: StartSecrets, options: SecretRotationOptions) {
    this.#config = config;
    this.#start = start;
    this.#options = options;
    this.#files = SECRET_FILE_VARIABLES.flatMap(({ file, fills, rotates }) => {
      const p = start.env[file];
      return !rotates || p === undefined || p === '' ? [] : [{ file, fills, path: p }];
    });
    this.#accepted = new Map(start.reads);
    for (const f of this.#files) {
      this.#rotations.set(f.fills, 0);
      this.#failures.set(f.fills, 0);
    }
    this.#trigger = new FileReloadTrigger({
      log: options.log,
      files: this.#files.map((f) => f.path),
      signature: () => this.#statSignature(),
      reload: (trigger) => this.reload(trigger),
      // While a failure stands, each poll tries again (a password changed on the server after its file).
      onQuietPoll: () => (this.#standing.size > 0 ? this.reload('retry') : undefined),
      messages: {
        hangup: 'reading the secret files again',
        watchFailed: 'secret file watch failed; polling only',
        cannotWatch: 'cannot watch a secret file directory; polling only',
      },
      debounceMs: options.debounceMs,
      pollIntervalMs: options.pollIntervalMs,
    });
  }

  /** The configuration with the secrets in use now. */
  get config(): Config {
    return this.#config;
  }

  /** Per file-backed variable: values taken since start (arkvory_secret_rotations_total). */
  get rotations(): ReadonlyMap<string, number> {
    return this.#rotations;
  }

  /** Per file-backed variable: new values refused since start (arkvory_secret_rotation_failures_total). */
  get failures(): ReadonlyMap<string, number> {
    return this.#failures;
  }

  /** Called after each reload that took a new value, with the configurations before and after. */
  onRotated(listener: (previous: Config, next: Config, rotated: readonly string[]) => void): void {
    this.#listeners.push(listener);
  }

  /** Watches the files' directories, polls their stat and listens for SIGHUP. */
  start(): Promise<void> {
    return this.#trigger.start();
  }

  close(): void {
    this.#trigger.close();
  }

  /** Reads every secret file again and takes the sound new values. One reload at a time. */
  reload(trigger: string): Promise<RotationOutcome> {
    return this.#serial.reload(trigger);
  }

  async #reloadOnce(trigger: string): Promise<RotationOutcome> {
    if (this.#files.length > 0) await this.#trigger.markRead();
    const read = this.#options.read ?? readSecretFile;
    const failed: RotationFailure[] = [];
    const changed: Array<FileVariable & { value: string }> = [];
    const states = new Map<string, string>();
    for (const f of this.#files) {
      states.set(f.fills, await fileState(f.path));
      let value: string;
      try {
        value = read(f.path);
      } catch (err) {
        failed.push({ secret: f.fills, reason: `${f.file}: ${(err as Error).message}` });
        continue;
      }
      if (value !== this.#accepted.get(f.path)) changed.push({ ...f, value });
    }
    // Each change alone first: a malformed value is then named by its own variable.
    let sound = changed.filter((c) => {
      const problem = this.#problemsWith([c]);
      if (problem !== undefined) failed.push({ secret: c.fills, reason: problem });
      return problem === undefined;
    });
    let next = sound.length > 0 ? this.#configWith(sound) : this.#config;
    if (typeof next === 'string') {
      for (const c of sound) failed.push({ secret: c.fills, reason: next });
      sound = [];
      next = this.#config;
    }
    for (const verifier of this.#options.verifiers ?? []) {
      if (typeof next === 'string' || !verifier.changed(this.#config, next)) continue;
      try {
        await verifier.verify(next);
      } catch (err) {
        const refused = sound.filter((c) => verifier.variables.includes(c.fills));
        for (const c of refused)
          failed.push({ secret: c.fills, reason: `${verifier.what} refused the new value: ${(err as Error).message}` });
        sound = sound.filter((c) => !refused.includes(c));
        next = sound.length > 0 ? this.#configWith(sound) : this.#config;
      }
    }
    if (typeof next === 'string') throw new Error('unreachable: a configuration validated above failed again');
    const rotated = sound.map((c) => c.fills);
    if (rotated.length > 0) {
      const previous = this.#config;
      for (const c of sound) this.#accepted.set(c.path, c.value);
      this.#config = next;
      for (const secret of rotated) {
        this.#rotations.set(secret, (this.#rotations.get(secret) ?? 0) + 1);
        this.#options.log.info(
          { variable: secret, trigger },
          `${secret} rotated: new connections and requests use the new value`,
        );
      }
      for (const listener of this.#listeners) listener(previous, next, rotated);
    }
    this.#report(trigger, failed, states);
    return { rotated, failed };
  }

  /**
   * A failure is logged and counted once per state of its file and reason: a poll retrying the same
   * refusal, or a SIGHUP right after the change event that already read the file, stays quiet.
   */
  #report(trigger: string, failed: readonly RotationFailure[], states: ReadonlyMap<string, string>): void {
    const failing = new Set(failed.map((f) => f.secret));
    for (const secret of this.#standing.keys()) if (!failing.has(secret)) this.#standing.delete(secret);
    for (const { secret, reason } of failed) {
      const standing = `${states.get(secret)}|${reason}`;
      if (this.#standing.get(secret) === standing) continue;
      this.#standing.set(secret, standing);
      this.#failures.set(secret, (this.#failures.get(secret) ?? 0) + 1);
      this.#options.log.warn(
        { code: 'secret_rotation_failed', variable: secret, trigger, reason },
        `${secret} not rotated: ${reason}; the previous value stays in use`,
      );
    }
  }

  /** loadConfig's problems with the accepted values plus `changes`, or undefined when there are none. */
  #problemsWith(changes: ReadonlyArray<FileVariable & { value: string }>): string | undefined {
    const built = this.#configWith(changes);
    return typeof built === 'string' ? built : undefined;
  }

  /** The configuration of the accepted values plus `changes`, or its problems (which never carry a secret). */
  #configWith(changes: ReadonlyArray<FileVariable & { value: string }>): Config | string {
    const values = new Map(this.#accepted);
    for (const c of changes) values.set(c.path, c.value);
    try {
      return loadConfig(this.#start.env, this.#start.cwd, (file) => {
        const value = values.get(file);
        if (value === undefined) throw new Error(`${file} was not read`);
        return value;
      });
    } catch (err) {
      if (err instanceof ConfigError) return err.problems.join('; ');
      throw err;
    }
  }

  /** The state of every file, to notice a change fs.watch did not report. */
  async #statSignature(): Promise<string> {
    const parts: string[] = [];
    for (const f of this.#files) parts.push(await fileState(f.path));
    return parts.join('|');
  }
}

/** Inode, size, mtime and mode of a file (stat follows symlinks, as a Secret volume's are). */
async function fileState(file: string): Promise<string> {
  try {
    const s = await stat(file);
    return `${s.ino}:${s.size}:${s.mtimeMs}:${s.mode}`;
  } catch {
    return 'missing';
  }
}
