import { describe, expect, it } from 'vitest';
import { defaultMaxConnections, OVERFLOW_ANSWERED, RESERVED_DESCRIPTORS } from './front-door.ts';

describe('defaultMaxConnections', () => {
  it('leaves the reserve and the answered overflow, then two descriptors per connection', () => {
    expect(defaultMaxConnections(1024)).toBe(Math.floor((1024 - RESERVED_DESCRIPTORS - OVERFLOW_ANSWERED) / 2));
    expect(defaultMaxConnections(256)).toBe(80);
    expect(defaultMaxConnections(65536)).toBe(32720);
  });

  it('at the worst the whole bound plus its overflow stays under the limit', () => {
    for (const limit of [256, 1024, 4096, 65536]) {
      const max = defaultMaxConnections(limit);
      expect(2 * (max + OVERFLOW_ANSWERED) + RESERVED_DESCRIPTORS).toBeLessThanOrEqual(limit + OVERFLOW_ANSWERED);
    }
  });

  it('never drops below a small working floor', () => {
    expect(defaultMaxConnections(64)).toBe(8);
  });
});
