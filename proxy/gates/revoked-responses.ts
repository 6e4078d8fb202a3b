/**
 * Responses the gateway itself reset because their credential was revoked while they ran
 * (transfers.ts `downloadStanding`): the request's end is then not the client's doing, and is not
 * logged as a client gone away (the cut has its own line).
 */
const revoked = new WeakSet<object>();

export function markRevoked(res: object): void {
  revoked.add(res);
}

export function wasRevoked(res: object): boolean {
  return revoked.has(res);
}
