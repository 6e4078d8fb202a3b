/**
 * A stand-in for the pool the usage recorder flushes through (tests only): it answers each flush's
 * statements as PostgreSQL would, or never (`hang`, `hangCommit`), or refuses the connection, and
 * sums what was committed, so a test reads what reached the "database" and how often.
 */
import pg from 'pg';
import type { UsageConnection } from '../../proxy/stats/usage-store.ts';

/**
 * `panicAfterCommit`: the COMMIT's record reaches the WAL, then the server fails in the critical
 * section that follows (it cannot update its commit log) and answers PANIC before it restarts;
 * crash recovery replays the record, so the transaction is committed all the same.
 */
export type FakeMode = 'ok' | 'hang' | 'hangCommit' | 'refuse' | 'panicAfterCommit';

export class FakeUsageDb {
  mode: FakeMode = 'ok';
  /** What `pg_xact_status` answers. */
  xactStatus: 'committed' | 'aborted' | 'in progress' | null = 'committed';
  connects = 0;
  /** Connections checked out and not yet given back. */
  checkedOut = 0;
  /** Connections given back with an error (ended by the pool). */
  ended = 0;
  statements: string[] = [];
  /** Sums committed: requests and downloads, and each INSERT's parameters. */
  committed = { requests: 0, downloads: 0, inserts: [] as unknown[][] };
  /** The INSERT whose COMMIT hung; `commitHung()` applies it as a server that went on would. */
  #hungInsert: unknown[] | undefined;
  #xid = 100;

  connect = async (): Promise<UsageConnection> => {
    this.connects++;
    if (this.mode === 'refuse') throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    this.checkedOut++;
    let insert: unknown[] | undefined;
    let released = false;
    const never = new Promise<never>(() => {});
    return {
      query: async (text: string, values?: unknown[]) => {
        this.statements.push(text.trim().split(/\s+/)[0]!);
        if (this.mode === 'hang') return never;
        if (text.startsWith('SELECT pg_current_xact_id')) return { rows: [{ xid: String(++this.#xid) }] };
        if (text.includes('pg_xact_status'))
          return { rows: (values![0] as string[]).map((xid) => ({ xid, status: this.xactStatus })) };
        if (text.startsWith('WITH')) insert = values;
        if (text === 'COMMIT') {
          if (this.mode === 'hangCommit') {
            this.#hungInsert = insert;
            return never;
          }
          if (insert) this.#apply(insert);
          if (this.mode === 'panicAfterCommit')
            throw Object.assign(new pg.DatabaseError('could not access status of transaction 812', 0, 'error'), {
              severity: 'PANIC',
              code: '58P01',
            });
        }
        return { rows: [] };
      },
      release: (err?: Error) => {
        if (released) throw new Error('released twice');
        released = true;
        this.checkedOut--;
        if (err) this.ended++;
      },
      on: () => {},
      off: () => {},
    };
  };

  /** The hung COMMIT took effect after all (the server went on once its client was gone). */
  commitHung(): void {
    if (this.#hungInsert) this.#apply(this.#hungInsert);
    this.#hungInsert = undefined;
  }

  #apply(params: unknown[]): void {
    this.committed.inserts.push(params);
    this.committed.downloads += (params[5] as number[]).reduce((a, b) => a + b, 0);
    this.committed.requests += (params[11] as number[]).reduce((a, b) => a + b, 0);
  }
}
