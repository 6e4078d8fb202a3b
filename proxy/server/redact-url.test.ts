import { describe, expect, it } from 'vitest';
import { redactUserinfo } from './redact-url.ts';

describe('redactUserinfo', () => {
  it.each([
    ['http://svc:secret@rules:9/x', 'http://<redacted>@rules:9/x'],
    // A password holding `@`: everything up to the host goes.
    ['http://svc:p@ss@rules:9/', 'http://<redacted>@rules:9/'],
    [
      'cannot reach redis://u:p@a@b:6379 and http://x:y@h/',
      'cannot reach redis://<redacted>@b:6379 and http://<redacted>@h/',
    ],
    // An `@` after the host (a path or query) is not user info.
    ['http://h/path@x?q=a@b', 'http://h/path@x?q=a@b'],
    ['no url here', 'no url here'],
  ])('%s', (text, expected) => expect(redactUserinfo(text)).toBe(expected));
});
