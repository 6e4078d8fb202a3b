import { describe, expect, it } from 'vitest';
import { messageLocale } from './embedded-initdb.ts';

describe('the embedded cluster message locale', () => {
  it('is English UTF-8 where `locale -a` lists it, then C.UTF-8, then en_US.utf8, else C', () => {
    expect(messageLocale('C\nC.UTF-8\nen_US.utf8\nen_US.UTF-8\nPOSIX\n')).toBe('en_US.UTF-8');
    expect(messageLocale('C\r\nen_US.utf8\r\nC.UTF-8\r\n')).toBe('C.UTF-8');
    expect(messageLocale('C\nen_US.utf8\nde_DE.utf8\n')).toBe('en_US.utf8');
    expect(messageLocale('C\nPOSIX\n')).toBe('C');
    // No `locale` (the container image has none): its output is taken as empty.
    expect(messageLocale('')).toBe('C');
  });
});
