import { expect, it } from 'vitest';
import { completionRefusal } from './completion-authority.ts';

const writer = { principalId: 'p', principalFound: true, disabled: false, permission: 'write' };

it('a principal still enabled and holding write publishes; so does a session of no principal', () => {
  expect(completionRefusal(writer)).toBeUndefined();
  expect(
    completionRefusal({ principalId: null, principalFound: false, disabled: false, permission: null }),
  ).toBeUndefined();
});

it('a principal disabled or gone is refused unauthorized; a grant lowered to read or removed, forbidden', () => {
  expect(completionRefusal({ ...writer, disabled: true })?.code).toBe('unauthorized');
  expect(completionRefusal({ ...writer, principalFound: false, permission: null })?.code).toBe('unauthorized');
  expect(completionRefusal({ ...writer, permission: 'read' })?.code).toBe('forbidden');
  expect(completionRefusal({ ...writer, permission: null })?.code).toBe('forbidden');
});
