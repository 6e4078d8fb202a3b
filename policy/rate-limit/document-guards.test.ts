import { describe, expect, it } from 'vitest';
import { DOCUMENT_BOUNDS, documentBoundProblems } from './document-bounds.ts';
import { refuseBypassRules, weakening } from './document-changes.ts';
import { RateLimitError } from './errors.ts';
import { emptyDocument, type RuleSpec } from './rules.ts';

const ban: RuleSpec = {
  name: 'ban_ip_after_auth_failures',
  action: 'limit',
  characteristics: ['ip'],
  limit: 20,
  period_s: 60,
  ban_for_s: 900,
};

describe('weakening a default rule', () => {
  it.each<[string, RuleSpec['on_store_error'], RegExp | undefined]>([
    ['still deny', 'deny', undefined],
    ['allow', 'allow', /turns on_store_error deny into allow/],
    ['absent (allow)', undefined, /turns on_store_error deny into allow/],
  ])('a default that fails closed, overridden by %s', (_name, onStoreError, expected) => {
    const closed: RuleSpec = { ...ban, on_store_error: 'deny' };
    const override: RuleSpec = { ...ban };
    if (onStoreError !== undefined) override.on_store_error = onStoreError;
    const why = weakening(closed, override);
    if (expected) expect(why).toMatch(expected);
    else expect(why).toBeUndefined();
  });

  it.each<[string, Partial<RuleSpec>, RegExp | undefined]>([
    ['the same rule', {}, undefined],
    ['a lower limit', { limit: 5 }, undefined],
    ['a longer window and ban', { period_s: 120, ban_for_s: 3600 }, undefined],
    ['action log', { action: 'log' }, /limit into log/],
    ['action skip', { action: 'skip' }, /limit into skip/],
    ['a higher limit', { limit: 21 }, /raises limit from 20 to 21/],
    ['a shorter window', { period_s: 1 }, /shortens period_s/],
    ['a shorter ban', { ban_for_s: 1 }, /shortens ban_for_s from 900 to 1/],
    ['no ban', { ban_for_s: undefined }, /removes the 900 s ban/],
    ['a narrower match', { match: { ip: '203.0.113.1' } }, /changes match/],
    ['other characteristics', { characteristics: [] }, /changes characteristics/],
    ['failing closed where the default fails open', { on_store_error: 'deny' }, undefined],
  ])('%s', (_name, change, expected) => {
    const override = { ...ban, ...change };
    if (!('ban_for_s' in change) || change.ban_for_s !== undefined) Object.assign(override, change);
    else delete override.ban_for_s;
    const why = weakening(ban, override);
    if (expected) expect(why).toMatch(expected);
    else expect(why).toBeUndefined();
  });

  it('refuses a batch republishing the default ban as log, naming the rule; stricter overrides and new names pass', () => {
    const defaults = () => [ban];
    const batch = (rules: RuleSpec[]) => new Map([['auth_failure', rules]]);
    let refused: unknown;
    try {
      refuseBypassRules(batch([{ ...ban, action: 'log' }]), defaults);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(RateLimitError);
    expect((refused as RateLimitError).code).toBe('bypass_not_allowed');
    expect((refused as RateLimitError).message).toMatch(/"ban_ip_after_auth_failures" in auth_failure weakens/);
    expect(() => refuseBypassRules(batch([{ ...ban, limit: 10 }]), defaults)).not.toThrow();
    expect(() => refuseBypassRules(batch([{ ...ban, name: 'other', action: 'log' }]), defaults)).not.toThrow();
  });
});

describe('bounds on a published document', () => {
  const rule = (i: number, match?: RuleSpec['match']): RuleSpec => ({
    name: `r${i}`,
    action: 'log',
    limit: 1,
    period_s: 60,
    ...(match ? { match } : {}),
  });
  const doc = (rules: RuleSpec[]) => ({ ...emptyDocument(), published_rules: { rules } });

  it('allows the bound and refuses one rule more', () => {
    const n = DOCUMENT_BOUNDS.publishedRulesPerLimiter;
    expect(documentBoundProblems('gateway_request', doc(Array.from({ length: n }, (_, i) => rule(i))))).toEqual([]);
    const over = documentBoundProblems('gateway_request', doc(Array.from({ length: n + 1 }, (_, i) => rule(i))));
    expect(over.map((p) => p.message)).toEqual([expect.stringMatching(/would hold 101 published rules; at most 100/)]);
  });

  it('refuses too many regexes, too costly regexes, and a document too large', () => {
    const many = Array.from({ length: 33 }, (_, i) => rule(i, { route: { regex: `^/r${i}` } }));
    expect(documentBoundProblems('gateway_request', doc(many))[0]?.message).toMatch(/33 published regexes; at most 32/);
    // ~400 instructions each: ten fit, eleven do not.
    const costly = Array.from({ length: 11 }, (_, i) => rule(i, { route: { regex: `[a-z]{1,100}[0-9]{1,100}${i}` } }));
    expect(
      documentBoundProblems('gateway_request', doc(costly))
        .map((p) => p.message)
        .join(),
    ).toMatch(/compile to \d+ instructions together; at most 4000/);
    const wordy = Array.from({ length: 50 }, (_, i) => ({ ...rule(i), description: 'x'.repeat(6000) }));
    expect(documentBoundProblems('gateway_request', doc(wordy))[0]?.message).toMatch(/bytes; at most 262144/);
  });
});
