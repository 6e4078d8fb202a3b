import { describe, expect, it } from 'vitest';
import { describeGatewayStatus } from './doctor-command.ts';

describe('doctor: a gateway’s workers', () => {
  it('names how many of its workers serve and how many were replaced', () => {
    const store = { state: 'ok', since: '2026-01-01T00:00:00Z', lastError: null };
    const workers = [
      { index: 0, state: 'serving', restarts: 0 },
      { index: 1, state: 'starting', restarts: 2 },
    ];
    expect(describeGatewayStatus(200, { status: 'serving', workers, store }).line).toBe(
      'serving, workers 1/2 serving (2 replaced after dying), store ok',
    );
    expect(
      describeGatewayStatus(200, { status: 'serving', workers: [{ index: 0, state: 'serving', restarts: 0 }], store })
        .line,
    ).toBe('serving, workers 1/1 serving, store ok');
    // A gateway before workers reports none.
    expect(describeGatewayStatus(200, { status: 'serving', store }).line).toBe('serving, store ok');
  });
});
