import { describe, expect, it } from 'vitest';
import { CURSORS, encodeCursor } from '../../policy/auth/page.ts';
import { parseAuditFilter } from './audit-event.ts';

describe('parseAuditFilter: the cursor', () => {
  it('continues before the id it holds, up to the largest bigint', () => {
    expect(parseAuditFilter({ cursor: encodeCursor(CURSORS.audit, ['42']) }).beforeId).toBe('42');
    expect(parseAuditFilter({ cursor: encodeCursor(CURSORS.audit, ['9223372036854775807']) }).beforeId).toBe(
      '9223372036854775807',
    );
  });

  // PostgreSQL refuses these as ::bigint: a forged cursor, the client's fault, not a 500.
  it.each(['9223372036854775808', '9999999999999999999', '12345678901234567890', '-1', 'x'])(
    'refuses a cursor holding %s as invalid_request',
    (id) => {
      expect(() => parseAuditFilter({ cursor: encodeCursor(CURSORS.audit, [id]) })).toThrow(
        expect.objectContaining({
          code: 'invalid_request',
          message: 'cursor is not valid: no listing gave it; start without it',
        }),
      );
    },
  );
});
