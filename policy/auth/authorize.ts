/**
 * Pure authorization decision for one request: the route's access level, the key's scopes and the
 * principal's grant on the route's repository. A repository the principal cannot see answers 404
 * (its existence is not revealed); one it sees but may not write answers 403.
 */
import type { Scope } from './principal.ts';

export type Access = 'public' | 'service' | 'read' | 'write' | 'admin';
export type Permission = 'read' | 'write';
export type Decision = { allow: true } | { allow: false; code: 'forbidden' | 'not_found' };

export function authorize(access: Access, scopes: ReadonlySet<Scope>, grant: Permission | undefined): Decision {
  switch (access) {
    case 'public':
    case 'service':
      return { allow: true };
    case 'admin':
      return scopes.has('admin') ? { allow: true } : { allow: false, code: 'forbidden' };
    case 'read':
      if (!grant) return { allow: false, code: 'not_found' };
      return scopes.has('read') || scopes.has('write') ? { allow: true } : { allow: false, code: 'forbidden' };
    case 'write':
      if (!grant) return { allow: false, code: 'not_found' };
      return grant === 'write' && scopes.has('write') ? { allow: true } : { allow: false, code: 'forbidden' };
  }
}
