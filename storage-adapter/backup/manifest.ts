/**
 * The backup manifest: what a complete backup holds, sealed with a sha256 of its own text. It is
 * written last (after every blob and the database file), so a backup without one is never complete.
 * Pure: no I/O.
 */
import { createHash } from 'node:crypto';
import { BackupError } from './errors.ts';

export const BACKUP_FORMAT = 'arkvory-backup/1';
export const MANIFEST_FILE = 'manifest.json';
export const DATABASE_FILE = 'database.jsonl';
export const RULE_DOCUMENTS_FILE = 'rule-documents.json';

/**
 * Coordination state, and the audit trail: kept in the backup for the record, never restored. The
 * trail is append-only (migrations/0040): a restore keeps the target's rows and adds its own.
 */
export const RECORD_ONLY_TABLES: ReadonlySet<string> = new Set([
  'arkvory_gateway_leases',
  'arkvory_download_policy',
  'arkvory_audit_events',
]);
/** The migrations' own record: never in a backup (the target's migrations make it). */
export const MIGRATIONS_TABLE = 'arkvory_schema_migrations';

export interface TableEntry {
  readonly name: string;
  readonly rows: number;
  /** False for coordination state (leases, the shared policy): recorded, never restored as live state. */
  readonly restored: boolean;
}

export interface BackupManifest {
  readonly format: typeof BACKUP_FORMAT;
  /** Database time of the snapshot (ISO 8601). Nothing published after it is in the backup. */
  readonly snapshotTime: string;
  /** When the backup was complete (ISO 8601, the backup process's clock). */
  readonly completedAt: string;
  readonly storageId: string;
  readonly store: { readonly kind: string; readonly location: string };
  /** Highest migration applied to the database the backup was made from. */
  readonly schemaVersion: number;
  /** In restore order: a table comes after every table it references. */
  readonly tables: readonly TableEntry[];
  readonly database: { readonly file: typeof DATABASE_FILE; readonly bytes: number; readonly sha256: string };
  readonly blobs: { readonly count: number; readonly bytes: number };
  /**
   * Completion order under its destination: one more than the highest of the complete backups there
   * when it was sealed (1 for the first). Orders backups for `--keep` and for a restore from a
   * destination where their names cannot: a name is the backup's start by its host's clock, which
   * may have been ahead. Absent in backups made before it was recorded (they come first, by name).
   */
  readonly sequence?: number;
  /** Rate-limit rule documents kept outside the database (Redis), read right after the snapshot; null when none. */
  readonly ruleDocuments: {
    readonly file: typeof RULE_DOCUMENTS_FILE;
    readonly count: number;
    readonly bytes: number;
    readonly sha256: string;
  } | null;
}

export interface SealedManifest extends BackupManifest {
  /** sha256 of this JSON text with this field absent. */
  readonly sha256: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const digest = (text: string) => createHash('sha256').update(text).digest('hex');
const render = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

/** The manifest's file text: the fields, then `sha256` over the text of the fields alone. */
export function sealManifest(manifest: BackupManifest): string {
  const { ...fields } = manifest as BackupManifest & { sha256?: string };
  delete fields.sha256;
  return render({ ...fields, sha256: digest(render(fields)) });
}

/** Parses and checks a manifest's text; throws `backup_invalid` naming what is wrong. */
export function openManifest(text: string, where: string): SealedManifest {
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new BackupError('backup_invalid', `${where} is not JSON`);
  }
  if (parsed === null || typeof parsed !== 'object' || parsed.format !== BACKUP_FORMAT) {
    throw new BackupError(
      'backup_invalid',
      `${where} is not an Arkvory backup manifest (format ${JSON.stringify((parsed as { format?: unknown } | null)?.format)}, expected ${BACKUP_FORMAT})`,
    );
  }
  const { sha256, ...fields } = parsed;
  if (typeof sha256 !== 'string' || digest(render(fields)) !== sha256) {
    throw new BackupError('backup_invalid', `${where} does not match its own sha256: it was changed or cut short`);
  }
  const m = parsed as unknown as SealedManifest;
  const ok =
    typeof m.snapshotTime === 'string' &&
    typeof m.storageId === 'string' &&
    Number.isInteger(m.schemaVersion) &&
    Array.isArray(m.tables) &&
    m.tables.every(
      (t) =>
        typeof t.name === 'string' &&
        /^arkvory_[a-z0-9_]+$/.test(t.name) &&
        Number.isInteger(t.rows) &&
        typeof t.restored === 'boolean',
    ) &&
    typeof m.database?.sha256 === 'string' &&
    (m.sequence === undefined || (Number.isSafeInteger(m.sequence) && m.sequence >= 1)) &&
    Number.isInteger(m.blobs?.count) &&
    (m.ruleDocuments === null ||
      (typeof m.ruleDocuments?.sha256 === 'string' && Number.isInteger(m.ruleDocuments.count)));
  if (!ok) throw new BackupError('backup_invalid', `${where} lacks a required field`);
  // Which tables a restore loads is this code's to say, not the manifest's: a restore empties and
  // loads every table marked restored, so a resealed manifest could otherwise wipe the target's
  // migration record or write leases and audit entries of its own choosing.
  const forbidden = m.tables.find((t) => t.name === MIGRATIONS_TABLE || (t.restored && RECORD_ONLY_TABLES.has(t.name)));
  if (forbidden)
    throw new BackupError(
      'backup_invalid',
      `${where} lists table ${forbidden.name} as restored, which no backup does (${forbidden.name === MIGRATIONS_TABLE ? 'the migrations record is never backed up' : 'it is kept for the record only'})`,
    );
  // The restore writes it into the target's storage-id and arkvory_storage row.
  if (!UUID.test(m.storageId))
    throw new BackupError(
      'backup_invalid',
      `${where} gives the storage id ${JSON.stringify(m.storageId.slice(0, 80))}, which is not a UUID`,
    );
  return m;
}
