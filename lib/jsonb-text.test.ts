import { describe, expect, it } from 'vitest';
import { jsonbText } from './jsonb-text.ts';

describe('jsonbText', () => {
  it('writes half a surrogate pair, in a value or a key, as U+FFFD', () => {
    const text = jsonbText({ note: 'x\ud800y', '\udc00': ['\udbff'] });
    expect(text).toBe('{"note":"x\\ufffdy","\\ufffd":["\\ufffd"]}');
    expect(JSON.parse(text)).toEqual({ note: 'x\ufffdy', '\ufffd': ['\ufffd'] });
  });

  it('leaves whole pairs, an escaped backslash before `ud800` and everything else as JSON.stringify writes them', () => {
    const value = { pair: '😀', text: '\\ud800', both: '\\\ud800', at: new Date(0), n: 1, none: null };
    const text = jsonbText(value);
    expect(JSON.parse(text)).toEqual({ ...JSON.parse(JSON.stringify(value)), both: '\\\ufffd' });
    expect(jsonbText({ pair: '😀', text: '\\ud800' })).toBe(JSON.stringify({ pair: '😀', text: '\\ud800' }));
  });
});
