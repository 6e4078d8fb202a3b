/** What a request is authenticated as. The id is the stable service-account id (ADR 0008). */
export const SCOPES = ['read', 'write', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

export interface Principal {
  /** Stable principal (service account) id; every key of the account resolves to it. */
  readonly id: string;
  readonly name: string;
  readonly keyId: string;
  readonly scopes: ReadonlySet<Scope>;
  /**
   * When the principal was last disabled (wall ms), if ever: a console session or pre-signed link
   * made before it stays void after a re-enable (docs/auth.md).
   */
  readonly disabledAtMs?: number | undefined;
  /** Bandwidth weight, 1..1000 (docs/bandwidth-and-admission.md, "Weights"); absent means 1. */
  readonly bandwidthWeight?: number | undefined;
  /** The groups it belongs to that have a ceiling (0 = none in that direction). */
  readonly groupCeilings?: readonly GroupCeilings[] | undefined;
}

/** Bandwidth ceilings of a group of principals or of a repository, bytes/s; 0 = none. */
export interface TransferCeilings {
  readonly downloadBytesPerSec: number;
  readonly uploadBytesPerSec: number;
}

export interface GroupCeilings extends TransferCeilings {
  readonly name: string;
}

export interface RepositoryCeilings extends TransferCeilings {
  /** Concurrent transfers of the repository on one gateway; 0 = no bound. */
  readonly maxTransfers: number;
}
