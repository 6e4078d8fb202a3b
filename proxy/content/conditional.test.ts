import { describe, expect, it } from 'vitest';
import {
  evaluateReadPreconditions,
  evaluateWritePreconditions,
  isIfRangeSatisfied,
  parseEntityTags,
  parseHttpDate,
} from './conditional.ts';

const etag = '"abc"';
const lastModifiedMs = Date.parse('Sun, 29 Nov 2026 10:00:00 GMT');
const v = { etag, lastModifiedMs };
const http = (ms: number) => new Date(ms).toUTCString();
/** The request's time in these tests: Last-Modified's own second (late 2026). */
const now = lastModifiedMs;

describe('parseEntityTags', () => {
  it.each([
    ['*', '*'],
    ['"a"', [{ weak: false, opaque: '"a"' }]],
    [
      'W/"a", "b"',
      [
        { weak: true, opaque: '"a"' },
        { weak: false, opaque: '"b"' },
      ],
    ],
    [
      '"a,b" , "c"',
      [
        { weak: false, opaque: '"a,b"' },
        { weak: false, opaque: '"c"' },
      ],
    ],
    ['a', undefined],
    ['"unterminated', undefined],
    [', "unterminated', undefined],
    ['"a" junk', undefined],
    ['"a""b"', undefined],
    ['x", "c"', undefined],
    // `#entity-tag` allows zero elements (RFC 9110 §5.6.1): well-formed, matching nothing.
    ['', []],
    [' , ', []],
    [',\t,', []],
    [' * ', '*'],
    ['\t*\t', '*'],
    // OWS is spaces and tabs only: a no-break or vertical space around is no part of the grammar.
    ['\u00a0*', undefined],
    ['*\u00a0', undefined],
    ['\u00a0"a"', undefined],
    ['"a"\u00a0', undefined],
    ['\v"a"', undefined],
    ['"a"\v', undefined],
    ['\u00a0', undefined],
    ['"a",', [{ weak: false, opaque: '"a"' }]],
    // etagc (RFC 9110 §8.8.3): %x21, %x23-7E and obs-text; no space, no control, no DEL.
    ['""', [{ weak: false, opaque: '""' }]],
    ['"!#~\x80\xff"', [{ weak: false, opaque: '"!#~\x80\xff"' }]],
    ['"a b"', undefined],
    ['"a\tb"', undefined],
    ['"a\x01"', undefined],
    ['"a\x7f"', undefined],
    ['"x", "a b"', undefined],
    ['W/"a b"', undefined],
    [
      '"a"\t,\tW/"b"',
      [
        { weak: false, opaque: '"a"' },
        { weak: true, opaque: '"b"' },
      ],
    ],
  ] as const)('%s', (input, expected) => {
    expect(parseEntityTags(input)).toEqual(expected);
  });
});

describe('evaluateReadPreconditions', () => {
  it.each([
    ['nothing', {}, 'proceed'],
    ['If-None-Match equal', { ifNoneMatch: etag }, 'not_modified'],
    ['If-None-Match weak equal (weak comparison)', { ifNoneMatch: `W/${etag}` }, 'not_modified'],
    ['If-None-Match in a list', { ifNoneMatch: `"x", ${etag}` }, 'not_modified'],
    ['If-None-Match star', { ifNoneMatch: '*' }, 'not_modified'],
    ['If-None-Match other', { ifNoneMatch: '"other"' }, 'proceed'],
    // Weak comparison ignores W/ on both sides, but the opaque tags must still be equal.
    ['If-None-Match weak other', { ifNoneMatch: 'W/"other"' }, 'proceed'],
    ['If-None-Match weak others in a list', { ifNoneMatch: 'W/"x", W/"other"' }, 'proceed'],
    ['If-None-Match malformed', { ifNoneMatch: 'nope' }, 'proceed'],
    // An empty list names no tag, and is there: If-Modified-Since is still ignored.
    ['If-None-Match empty', { ifNoneMatch: '', ifModifiedSince: http(lastModifiedMs) }, 'proceed'],
    ['If-Modified-Since equal', { ifModifiedSince: http(lastModifiedMs) }, 'not_modified'],
    ['If-Modified-Since later', { ifModifiedSince: http(lastModifiedMs + 60_000) }, 'not_modified'],
    ['If-Modified-Since earlier', { ifModifiedSince: http(lastModifiedMs - 1000) }, 'proceed'],
    ['If-Modified-Since invalid', { ifModifiedSince: 'yesterday' }, 'proceed'],
    // Not HTTP-dates, though Date.parse reads each as a time after Last-Modified: ignored (RFC 9110 §13.1.3).
    ['If-Modified-Since a bare year', { ifModifiedSince: '2999' }, 'proceed'],
    ['If-Modified-Since words and a year', { ifModifiedSince: 'tomorrow 2999' }, 'proceed'],
    ['If-Modified-Since a month and a year', { ifModifiedSince: 'Dec 2999' }, 'proceed'],
    ['If-Modified-Since ISO 8601', { ifModifiedSince: '2999-01-01T00:00:00Z' }, 'proceed'],
    ['If-Modified-Since without its zone', { ifModifiedSince: 'Fri, 01 Jan 2999 00:00:00' }, 'proceed'],
    ['If-Modified-Since another zone', { ifModifiedSince: 'Fri, 01 Jan 2999 00:00:00 +0100' }, 'proceed'],
    ['If-Modified-Since a day that does not exist', { ifModifiedSince: 'Fri, 31 Feb 2999 00:00:00 GMT' }, 'proceed'],
    ['If-Modified-Since an hour that does not exist', { ifModifiedSince: 'Fri, 01 Jan 2999 24:00:00 GMT' }, 'proceed'],
    ['If-Modified-Since a minute that does not exist', { ifModifiedSince: 'Fri, 01 Jan 2999 00:60:00 GMT' }, 'proceed'],
    ['If-Modified-Since a second that does not exist', { ifModifiedSince: 'Fri, 01 Jan 2999 00:00:60 GMT' }, 'proceed'],
    // The three HTTP-date forms a recipient must accept.
    ['If-Modified-Since IMF-fixdate', { ifModifiedSince: 'Tue, 01 Jan 2999 00:00:00 GMT' }, 'not_modified'],
    ['If-Modified-Since RFC 850', { ifModifiedSince: 'Sunday, 29-Nov-26 10:00:00 GMT' }, 'not_modified'],
    ['If-Modified-Since RFC 850 a second before', { ifModifiedSince: 'Sunday, 29-Nov-26 09:59:59 GMT' }, 'proceed'],
    ['If-Modified-Since RFC 850 last century', { ifModifiedSince: 'Sunday, 06-Nov-94 08:49:37 GMT' }, 'proceed'],
    ['If-Modified-Since asctime', { ifModifiedSince: 'Sun Nov 29 10:00:00 2026' }, 'not_modified'],
    ['If-Modified-Since asctime, one-digit day', { ifModifiedSince: 'Sun Dec  6 10:00:00 2026' }, 'not_modified'],
    ['If-Modified-Since asctime a second before', { ifModifiedSince: 'Sun Nov 29 09:59:59 2026' }, 'proceed'],
    [
      'If-Modified-Since the last minute and second of an hour',
      { ifModifiedSince: 'Sun, 29 Nov 2026 10:59:59 GMT' },
      'not_modified',
    ],
    ['If-Modified-Since with spaces around', { ifModifiedSince: ' Sun, 29 Nov 2026 10:00:00 GMT ' }, 'not_modified'],
    [
      'If-Modified-Since RFC 850, year 49 is 2049',
      { ifModifiedSince: 'Monday, 01-Jan-49 00:00:00 GMT' },
      'not_modified',
    ],
    // RFC 9110 §5.6.7: only a year more than 50 years ahead (of 2026 here) is read in the past.
    [
      'If-Modified-Since RFC 850, year 50 is 2050',
      { ifModifiedSince: 'Saturday, 01-Jan-50 00:00:00 GMT' },
      'not_modified',
    ],
    [
      'If-Modified-Since RFC 850, year 76 is 2076',
      { ifModifiedSince: 'Wednesday, 01-Jan-76 00:00:00 GMT' },
      'not_modified',
    ],
    ['If-Modified-Since RFC 850, year 77 is 1977', { ifModifiedSince: 'Saturday, 01-Jan-77 00:00:00 GMT' }, 'proceed'],
    [
      'If-None-Match wins over If-Modified-Since',
      { ifNoneMatch: '"other"', ifModifiedSince: http(lastModifiedMs) },
      'proceed',
    ],
  ] as const)('%s', (_name, headers, expected) => {
    expect(evaluateReadPreconditions(headers, v, now)).toBe(expected);
  });

  it('compares If-Modified-Since at one-second resolution, as HTTP dates are', () => {
    const withMs = { etag, lastModifiedMs: lastModifiedMs + 999 };
    expect(evaluateReadPreconditions({ ifModifiedSince: http(lastModifiedMs) }, withMs, now)).toBe('not_modified');
    expect(evaluateReadPreconditions({ ifModifiedSince: http(lastModifiedMs - 1000) }, withMs, now)).toBe('proceed');
  });
});

describe('parseHttpDate', () => {
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  it.each(months.map((month, index) => [month, index]))('reads %s as month %i of every form', (month, index) => {
    const ms = Date.UTC(2026, index, 9, 1, 2, 3);
    expect(parseHttpDate(`Mon, 09 ${month} 2026 01:02:03 GMT`, now)).toBe(ms);
    expect(parseHttpDate(`Monday, 09-${month}-26 01:02:03 GMT`, now)).toBe(ms);
    expect(parseHttpDate(`Mon ${month}  9 01:02:03 2026`, now)).toBe(ms);
  });

  it.each([
    // RFC 9110 §5.6.7: a leap second is a time (23:59:60), read as 23:59:59 in every form.
    ['Wed, 31 Dec 2036 23:59:60 GMT', Date.UTC(2036, 11, 31, 23, 59, 59)],
    ['Wednesday, 31-Dec-36 23:59:60 GMT', Date.UTC(2036, 11, 31, 23, 59, 59)],
    ['Wed Dec 31 23:59:60 2036', Date.UTC(2036, 11, 31, 23, 59, 59)],
    ['Wed, 31 Dec 2036 23:59:59 GMT', Date.UTC(2036, 11, 31, 23, 59, 59)],
    ['Wed, 31 Dec 2036 23:59:58 GMT', Date.UTC(2036, 11, 31, 23, 59, 58)],
    ['Wed, 31 Dec 2036 23:58:59 GMT', Date.UTC(2036, 11, 31, 23, 58, 59)],
    // Second 60 of any other minute is no time.
    ['Wed, 31 Dec 2036 23:58:60 GMT', undefined],
    ['Wed, 31 Dec 2036 22:59:60 GMT', undefined],
    ['Wed, 31 Dec 2036 12:30:60 GMT', undefined],
    ['Wed, 31 Dec 2036 23:59:61 GMT', undefined],
    // OWS around is spaces and tabs; a no-break or vertical space makes it no HTTP-date.
    ['\t Wed, 31 Dec 2036 23:59:58 GMT \t', Date.UTC(2036, 11, 31, 23, 59, 58)],
    ['\u00a0Wed, 31 Dec 2036 23:59:58 GMT', undefined],
    ['Wed, 31 Dec 2036 23:59:58 GMT\u00a0', undefined],
    ['\vWed, 31 Dec 2036 23:59:58 GMT', undefined],
    ['Wed, 31 Dec 2036 23:59:58 GMT\v', undefined],
  ] as const)('reads %j as %s', (text, ms) => {
    expect(parseHttpDate(text, now)).toBe(ms);
  });

  it.each([
    // [two-digit year, the request's year, the year read]: the 100 years up to 50 ahead of it.
    ['00', 2026, 2000],
    ['49', 2026, 2049],
    ['50', 2026, 2050],
    ['76', 2026, 2076],
    ['77', 2026, 1977],
    ['99', 2026, 1999],
    ['30', 2080, 2130],
    ['31', 2080, 2031],
    ['99', 2099, 2099],
    ['49', 2099, 2149],
    ['50', 2099, 2050],
  ] as const)('reads the RFC 850 year %s in %i as %i (RFC 9110 §5.6.7)', (twoDigits, nowYear, year) => {
    const ms = parseHttpDate(`Monday, 09-Mar-${twoDigits} 01:02:03 GMT`, Date.UTC(nowYear, 5, 1));
    expect(new Date(ms!).getUTCFullYear()).toBe(year);
  });
});

describe('isIfRangeSatisfied', () => {
  it.each([
    ['absent', undefined, true],
    ['same strong etag', etag, true],
    ['weak etag never matches', `W/${etag}`, false],
    ['other etag', '"other"', false],
    // Last-Modified is not a strong validator (versions from before migrations/0075 may share a second).
    ['exact date', http(lastModifiedMs), false],
    ['later date', http(lastModifiedMs + 1000), false],
    ['earlier date', http(lastModifiedMs - 1000), false],
    ['garbage', 'not a date', false],
    ['same strong etag with spaces around', ` ${etag} `, true],
    ['a list of two, even of the same tag', `${etag}, ${etag}`, false],
    ['an unterminated tag', '"abc', false],
    ['an unterminated tag holding the date', `"${http(lastModifiedMs)}`, false],
    ['a weak tag holding the date', `W/"${http(lastModifiedMs)}"`, false],
    ['exact second but with milliseconds', new Date(lastModifiedMs + 500).toISOString(), false],
    // One entity-tag, not a list (If-Range = entity-tag / HTTP-date).
    ['the tag and a comma', `${etag},`, false],
    ['a comma and the tag', `, ${etag}`, false],
    ['the tag with OWS around', `\t ${etag} \t`, true],
    ['the tag after a no-break space (not OWS)', `\u00a0${etag}`, false],
    ['the tag before a no-break space (not OWS)', `${etag}\u00a0`, false],
    ['star', '*', false],
  ] as const)('%s', (_name, header, expected) => {
    expect(isIfRangeSatisfied(header, v)).toBe(expected);
  });
});

describe('evaluateWritePreconditions', () => {
  it.each([
    ['nothing', {}, v, 'proceed'],
    ['nothing, no current version', {}, undefined, 'proceed'],
    ['If-Match equal', { ifMatch: etag }, v, 'proceed'],
    ['If-Match in a list', { ifMatch: `"x", ${etag}` }, v, 'proceed'],
    ['If-Match star', { ifMatch: '*' }, v, 'proceed'],
    ['If-Match other', { ifMatch: '"other"' }, v, 'precondition_failed'],
    ['If-Match weak equal (strong comparison)', { ifMatch: `W/${etag}` }, v, 'precondition_failed'],
    ['If-Match malformed', { ifMatch: 'abc' }, v, 'precondition_failed'],
    ['If-Match star, no current version', { ifMatch: '*' }, undefined, 'precondition_failed'],
    ['If-Match equal, no current version', { ifMatch: etag }, undefined, 'precondition_failed'],
    ['If-Unmodified-Since equal', { ifUnmodifiedSince: http(lastModifiedMs) }, v, 'proceed'],
    ['If-Unmodified-Since later', { ifUnmodifiedSince: http(lastModifiedMs + 1000) }, v, 'proceed'],
    ['If-Unmodified-Since earlier', { ifUnmodifiedSince: http(lastModifiedMs - 1000) }, v, 'precondition_failed'],
    ['If-Unmodified-Since not a date', { ifUnmodifiedSince: '1999' }, v, 'proceed'],
    ['If-Unmodified-Since, no current version', { ifUnmodifiedSince: http(0) }, undefined, 'proceed'],
    [
      'If-Match holds: If-Unmodified-Since ignored',
      { ifMatch: etag, ifUnmodifiedSince: http(lastModifiedMs - 1000) },
      v,
      'proceed',
    ],
    ['If-None-Match star', { ifNoneMatch: '*' }, v, 'precondition_failed'],
    ['If-None-Match star, no current version', { ifNoneMatch: '*' }, undefined, 'proceed'],
    ['If-None-Match weak equal (weak comparison)', { ifNoneMatch: `W/${etag}` }, v, 'precondition_failed'],
    ['If-None-Match other', { ifNoneMatch: '"other"' }, v, 'proceed'],
    ['If-None-Match in a list', { ifNoneMatch: `"other", ${etag}` }, v, 'precondition_failed'],
    ['If-None-Match malformed', { ifNoneMatch: 'abc' }, undefined, 'precondition_failed'],
    // An empty list (RFC 9110 §5.6.1 allows zero elements) names no version: If-None-Match holds,
    // If-Match does not.
    ['If-None-Match empty', { ifNoneMatch: '' }, v, 'proceed'],
    ['If-None-Match commas alone', { ifNoneMatch: ' , ' }, v, 'proceed'],
    ['If-None-Match empty, no current version', { ifNoneMatch: '' }, undefined, 'proceed'],
    ['If-Match empty', { ifMatch: '' }, v, 'precondition_failed'],
    ['If-Match empty, no current version', { ifMatch: '' }, undefined, 'precondition_failed'],
    ['If-None-Match after a no-break space', { ifNoneMatch: `\u00a0${etag}` }, undefined, 'precondition_failed'],
    ['If-Match holds, If-None-Match does not', { ifMatch: etag, ifNoneMatch: etag }, v, 'precondition_failed'],
  ] as const)('%s', (_name, headers, current, expected) => {
    expect(evaluateWritePreconditions(headers, current, now)).toBe(expected);
  });

  // A base path's version has two tags: its bytes' and its metadata answer's.
  const both = { ...v, alsoEtag: '"meta"' };
  it.each([
    ['If-Match the other tag', { ifMatch: '"meta"' }, 'proceed'],
    ['If-Match the other tag in a list', { ifMatch: '"x", "meta"' }, 'proceed'],
    ['If-Match the first tag', { ifMatch: etag }, 'proceed'],
    ['If-Match the other tag, weak (strong comparison)', { ifMatch: 'W/"meta"' }, 'precondition_failed'],
    ['If-Match neither', { ifMatch: '"x"' }, 'precondition_failed'],
    ['If-None-Match the other tag', { ifNoneMatch: '"meta"' }, 'precondition_failed'],
    ['If-None-Match the other tag, weak', { ifNoneMatch: 'W/"meta"' }, 'precondition_failed'],
    ['If-None-Match neither', { ifNoneMatch: '"x"' }, 'proceed'],
  ] as const)('%s', (_name, headers, expected) => {
    expect(evaluateWritePreconditions(headers, both, now)).toBe(expected);
  });

  it('a read never matches the other tag', () => {
    expect(evaluateReadPreconditions({ ifNoneMatch: '"meta"' }, { ...v, alsoEtag: '"meta"' }, now)).toBe('proceed');
  });
});
