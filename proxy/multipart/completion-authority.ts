/**
 * Pure: whether a multipart completion may still publish. A session records the principal that
 * opened it, not the key it used; each part and the completion request were authorized as they came,
 * but the worker publishes later (a queue, a store failure waited out until the session expires). So
 * before it publishes, the principal must still be enabled and still hold write on the repository,
 * as a direct upload is asked again once its body is staged (content-routes.ts). A session of no
 * principal (opened where no authentication applies) has nothing to check.
 */
import { PolicyError } from '../../policy/errors.ts';

/** What the database says now of the session's principal, read with its grant on the session's repository. */
export interface CompletionAuthority {
  /** The session's principal, or null for a session opened without one. */
  readonly principalId: string | null;
  /** Whether the principal still exists. */
  readonly principalFound: boolean;
  readonly disabled: boolean;
  /** Its grant on the session's repository now, or null when it has none. */
  readonly permission: string | null;
}

/** The refusal a completion meets, or undefined when it may publish. */
export function completionRefusal(a: CompletionAuthority): PolicyError | undefined {
  if (a.principalId === null) return undefined;
  if (!a.principalFound || a.disabled)
    return new PolicyError(
      'unauthorized',
      'The principal that opened the upload is disabled or gone; nothing was published.',
    );
  if (a.permission !== 'write')
    return new PolicyError(
      'forbidden',
      'The principal that opened the upload no longer holds write on the repository; nothing was published.',
    );
  return undefined;
}

/**
 * The refusal for the catalog insert's verdict on a session (catalog.ts `PublishAuthority`), in the
 * words of `completionRefusal`: the same failure whichever check saw the change first.
 */
export function completionRefusalOf(verdict: 'unauthorized' | 'forbidden' | 'not_found'): PolicyError {
  return completionRefusal({
    principalId: 'checked',
    principalFound: verdict !== 'unauthorized',
    disabled: verdict === 'unauthorized',
    permission: null,
  })!;
}
