/**
 * What an admin change is recorded with, the same from the admin API and the CLI (pure): ids,
 * names and scopes, never a key or a secret (a created key's `key` is dropped here).
 */
import type { CertificateBindingRow, GrantRow, GroupRow, KeyRow, PrincipalRow } from '../../policy/auth/admin-store.ts';

export const principalDetails = (p: PrincipalRow) => ({ principalId: p.id, name: p.name, disabled: p.disabled });

export const keyDetails = (k: KeyRow) => ({
  keyId: k.keyId,
  principalId: k.principalId,
  kind: k.kind,
  scopes: k.scopes,
  expiresAt: k.expiresAt,
});

export const certificateDetails = (c: CertificateBindingRow) => ({
  san: c.san,
  principalId: c.principalId,
  scopes: c.scopes,
});

export const grantDetails = (g: GrantRow) => ({ ...g });

/** A group's ceilings and the members its answer holds (the first page); its cursor is no change. */
export const groupDetails = (g: GroupRow) => ({
  name: g.name,
  downloadBytesPerSec: g.downloadBytesPerSec,
  uploadBytesPerSec: g.uploadBytesPerSec,
  members: g.members,
});

/**
 * The rule names a published batch names, per limiter: each limiter's rules as a list
 * (`{ rate_limits: { limiter: [rules] } }`) or as a rule list (`{ limiter: { rules: [...] } }`), the
 * two forms a publish takes.
 */
export function publishedRuleNames(batch: unknown): Record<string, string[]> {
  const limits = (batch as { rate_limits?: unknown } | null)?.rate_limits;
  if (typeof limits !== 'object' || limits === null) return {};
  return Object.fromEntries(
    Object.entries(limits).map(([limiter, list]) => {
      const rules = Array.isArray(list) ? list : (list as { rules?: unknown } | null)?.rules;
      return [
        limiter,
        Array.isArray(rules) ? rules.map((r) => String((r as { name?: unknown } | null)?.name ?? '')) : [],
      ];
    }),
  );
}

/**
 * What an override set holds: how many rules and their names, the same from the rules service's
 * route and the CLI (a reader of the trail sees which rules a subject was given, not only that it
 * was given some).
 */
export const overrideDetails = (rules: ReadonlyArray<{ readonly name: string }>) => ({
  rules: rules.length,
  names: rules.map((r) => r.name),
});
