/** A rule change of unknown outcome exits 4 and is never reported as done, whether or not its audit entry is recorded. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { changeOrUnknownOutcome, EXIT_OUTCOME_UNKNOWN } from './cli-audit.ts';

const unknownOutcome = () =>
  Promise.reject(Object.assign(new Error('the COMMIT was cut'), { code: 'store_outcome_unknown' }));
const audit = { action: 'rate_limit.publish' as const, target: { limiter: 'gateway_request' } };

/** Runs a rule change of unknown outcome whose audit insert answers `answer`: its exit code, what it wrote to stderr and the insert. */
async function publishUnknown(answer: () => Promise<unknown>) {
  const stderr = vi.spyOn(process.stderr, 'write').mockReturnValue(true);
  const query = vi.fn().mockImplementation(answer);
  const code = await changeOrUnknownOutcome(
    'ratelimit publish',
    'arkvory ratelimit show',
    { query },
    audit,
    unknownOutcome,
  );
  return { code, query, written: stderr.mock.calls.map((c) => String(c[0])).join('') };
}

describe('changeOrUnknownOutcome', () => {
  afterEach(() => vi.restoreAllMocks());

  it('records the unknown outcome and exits 4', async () => {
    const { code, query, written } = await publishUnknown(() => Promise.resolve({ rows: [], rowCount: 1 }));
    expect(code).toBe(EXIT_OUTCOME_UNKNOWN);
    expect(query).toHaveBeenCalledTimes(1);
    expect(written).toContain('store_outcome_unknown');
  });

  it('exits 4 when the audit entry cannot be recorded either, saying the change may or may not have been done', async () => {
    const { code, written } = await publishUnknown(() => Promise.reject(new Error('connection terminated')));
    expect(code).toBe(EXIT_OUTCOME_UNKNOWN);
    expect(written).toContain('audit_not_recorded: rate_limit.publish may or may not have been done');
    expect(written).toContain('connection terminated');
    expect(written).not.toContain('was done');
  });
});
