import { describe, expect, it } from 'vitest';
import { defaultMaxPendingHandshakes, MIN_PENDING_HANDSHAKES, pickEviction } from './pending-handshakes.ts';

describe('pending TLS handshakes', () => {
  it('the default bound is an eighth of the connection bound, never below the minimum', () => {
    expect(defaultMaxPendingHandshakes(8)).toBe(MIN_PENDING_HANDSHAKES);
    expect(defaultMaxPendingHandshakes(464)).toBe(58);
    expect(defaultMaxPendingHandshakes(32_720)).toBe(4090);
  });

  it.each([
    { bytes: [0, 0, 0], pick: 0, why: 'all silent: the oldest' },
    { bytes: [517, 0, 6], pick: 1, why: 'a sent ClientHello outlives a silent socket' },
    { bytes: [6, 6, 0], pick: 2, why: 'fewest bytes, even when younger' },
    { bytes: [517, 1700, 6, 6], pick: 2, why: 'the oldest among equals' },
  ])('closes the least advanced handshake: $why', ({ bytes, pick }) => {
    expect(pickEviction(bytes.map((bytesRead) => ({ bytesRead })))).toBe(pick);
  });
});
