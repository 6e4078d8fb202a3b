/**
 * When to read files again that a running process serves from (secrets, a TLS pair): on SIGHUP, on a
 * change in the files' directories (fs.watch, debounced: a pair of files is two writes) and on a
 * poll of the files' stat (fs.watch misses changes on some file systems and bind mounts). What a
 * reload reads and decides stays with its owner; this only calls `reload` with what set it off.
 */
import { type FSWatcher, watch } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';

export interface FileReloadTriggerOptions {
  readonly log: Logger;
  /** The files whose directories are watched; none = SIGHUP only. */
  readonly files: readonly string[];
  /** A string that changes when any of the files does (their stat), compared on each poll. */
  readonly signature: () => Promise<string>;
  /** Reads the files again; `trigger` says why ("SIGHUP", "file change", "file change (poll)"). */
  readonly reload: (trigger: string) => unknown;
  /** Called on a poll that saw no change (a standing failure may want a retry). */
  readonly onQuietPoll?: () => unknown;
  /** Log lines, naming what is reloaded. */
  readonly messages: {
    readonly hangup: string;
    readonly watchFailed: string;
    readonly cannotWatch: string;
  };
  /** Wait after a change event before reading, so files written one after the other are read together. */
  readonly debounceMs?: number | undefined;
  /** How often the files' stat is compared. */
  readonly pollIntervalMs?: number | undefined;
}

const DEFAULT_DEBOUNCE_MS = 250;
const DEFAULT_POLL_INTERVAL_MS = 10_000;

export class FileReloadTrigger {
  readonly #options: FileReloadTriggerOptions;
  #watchers: FSWatcher[] = [];
  #pollTimer: NodeJS.Timeout | undefined;
  #debounceTimer: NodeJS.Timeout | undefined;
  #lastStat: string | undefined;
  readonly #onHangup = () => {
    this.#options.log.info({ signal: 'SIGHUP' }, this.#options.messages.hangup);
    void this.#options.reload('SIGHUP');
  };

  constructor(options: FileReloadTriggerOptions) {
    this.#options = options;
  }

  /** Takes the files' state as read now; the owner calls it when it reads them, so a poll sees only later changes. */
  async markRead(): Promise<void> {
    this.#lastStat = await this.#options.signature();
  }

  /** Listens for SIGHUP, watches the files' directories and polls their stat. */
  async start(): Promise<void> {
    process.on('SIGHUP', this.#onHangup);
    const { files, log, messages } = this.#options;
    if (files.length === 0) return;
    if (this.#lastStat === undefined) await this.markRead();
    for (const dir of new Set(files.map((f) => path.dirname(f)))) {
      try {
        // The whole directory: a Kubernetes Secret volume swaps a `..data` symlink, not the files.
        const watcher = watch(dir, { persistent: false }, () => this.#scheduleReload());
        watcher.on('error', (err) => log.warn({ err: { message: err.message }, dir }, messages.watchFailed));
        this.#watchers.push(watcher);
      } catch (err) {
        log.warn({ err: { message: (err as Error).message }, dir }, messages.cannotWatch);
      }
    }
    this.#pollTimer = setInterval(() => void this.#poll(), this.#options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS);
    this.#pollTimer.unref();
  }

  close(): void {
    for (const w of this.#watchers.splice(0)) w.close();
    clearInterval(this.#pollTimer);
    clearTimeout(this.#debounceTimer);
    process.off('SIGHUP', this.#onHangup);
  }

  #scheduleReload(): void {
    clearTimeout(this.#debounceTimer);
    this.#debounceTimer = setTimeout(
      () => void this.#options.reload('file change'),
      this.#options.debounceMs ?? DEFAULT_DEBOUNCE_MS,
    );
    this.#debounceTimer.unref();
  }

  async #poll(): Promise<void> {
    if ((await this.#options.signature()) !== this.#lastStat) await this.#options.reload('file change (poll)');
    else await this.#options.onQuietPoll?.();
  }
}

/**
 * One reload at a time: a reload asked for while one runs gets that one's outcome, and one more
 * reload follows it (with the latest trigger), so the last state of the files wins.
 */
export class SerialReload<Outcome> {
  readonly #run: (trigger: string) => Promise<Outcome>;
  #running: Promise<Outcome> | undefined;
  #again: string | undefined;

  constructor(run: (trigger: string) => Promise<Outcome>) {
    this.#run = run;
  }

  async reload(trigger: string): Promise<Outcome> {
    if (this.#running) {
      this.#again = trigger;
      return this.#running;
    }
    this.#running = this.#run(trigger);
    try {
      return await this.#running;
    } finally {
      this.#running = undefined;
      const again = this.#again;
      this.#again = undefined;
      if (again !== undefined) void this.reload(again);
    }
  }
}
