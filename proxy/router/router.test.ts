/** Pure router logic: route classes, backend selection, forwarded headers, trusted proxies, origins. */
import type { IncomingHttpHeaders } from 'node:http';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BackendPool, pickLeastActive } from './backend-pool.ts';
import { parseBackendList, parseOrigin } from './backend-url.ts';
import { backendsFromLeases } from './discovery.ts';
import {
  buildUpstreamHeaders,
  clientAddress,
  clientAddressFrom,
  createTrustedProxies,
  forwardedForNodes,
  forwardedHost,
  forwardedPrefix,
  forwardingHops,
  isAuthorityText,
  normalizeAddress,
  parseTrustedProxies,
  requestScheme,
} from './forwarded.ts';
import {
  connectionNamed,
  isHopByHopResponse,
  RequestHeader,
  requestHeaderKind,
  responseHeaderList,
} from './hop-by-hop.ts';
import { errors as undiciErrors } from 'undici';
import { createIdleSweep } from './proxy-handler.ts';
import { CONNECT_FAILURES, ConnectTimeout, UpstreamTimeout, upstreamFailure } from './upstream-errors.ts';
import { classifyRequest, isContentReadPath, isContentReadSegments, isRetryable } from './route-class.ts';

describe('classifyRequest', () => {
  const repo = '/api/v1/repositories/r';
  it.each([
    ['GET', `${repo}/artifacts/a.bin/content`, 'content-read'],
    ['HEAD', `${repo}/artifacts/a.bin/content?x=1`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/content`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/assets/x.tgz/content`, 'content-read'],
    ['GET', `${repo}/artifacts/a%2Fb/content`, 'content-read'],
    ['GET', `${repo}/artifacts/content/content`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/apt/Packages`, 'content-read'],
    ['HEAD', `${repo}/packages/p/1.0/apt/./Release`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/apt/%2E/p_1.0_all.deb`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/apt/%2e/Packages`, 'content-read'],
    ['GET', `${repo}/./artifacts/a/content`, 'content-read'],
    ['GET', `${repo}/packages/./p/1.0/assets/x.tgz/content`, 'content-read'],
    ['GET', `${repo}/packages/p/./1.0/content`, 'content-read'],
    // With a dot segment the path takes the reference form: each of its checks, one by one.
    ['GET', '/api/v2/repositories/r/./artifacts/a/content', 'writer'],
    ['GET', '/apx/v1/repositories/r/./artifacts/a/content', 'writer'],
    ['GET', '/api/v1/repository/r/./artifacts/a/content', 'writer'],
    ['GET', `${repo}/./artifacts//content`, 'writer'],
    ['GET', `${repo}/./artifacts/a/contents`, 'writer'],
    ['GET', `${repo}/./artifact/a/content`, 'writer'],
    ['GET', `${repo}/./packages/p/content`, 'writer'],
    ['GET', `${repo}/./artifacts/p/1.0/content`, 'writer'],
    ['GET', `${repo}/./packages/p/1.0/assets/x/y/content`, 'writer'],
    ['GET', `${repo}/./packages/p/1.0/asset/x/content`, 'writer'],
    ['GET', `${repo}/./artifacts/p/1.0/assets/x/content`, 'writer'],
    ['GET', `${repo}/./packages/p/1.0/ap/Packages`, 'writer'],
    ['GET', `${repo}/./artifacts/p/1.0/apt/Packages`, 'writer'],
    ['GET', `${repo}/./x2e/artifacts/a/content`, 'writer'],
    ['GET', `${repo}/./%2x/artifacts/a/content`, 'writer'],
    ['GET', `${repo}/./%3e/artifacts/a/content`, 'writer'],
    ['GET', `${repo}/%2eX/artifacts/a/content`, 'writer'],
    // The path the gateway routes, not the one written: `..`, `%2e%2e`, `.%2E` resolved, `\` read as `/`.
    ['GET', `${repo}/packages/x/../content`, 'writer'],
    ['GET', `${repo}/packages/x/%2e%2e/content`, 'writer'],
    ['GET', `${repo}/packages/x/.%2E/content`, 'writer'],
    ['GET', `${repo}/packages/p/1.0/apt/${'..\\'.repeat(8)}console\\`, 'write'],
    ['GET', `${repo}/packages/p/1.0/apt/${'..\\'.repeat(6)}admin\\quotas`, 'writer'],
    ['GET', '/x/../console/', 'write'],
    ['GET', '/x/..\\console', 'write'],
    ['GET', `${repo}/x/../artifacts/a/content`, 'content-read'],
    ['GET', `${repo}/x/%2E%2e/artifacts/a/content`, 'content-read'],
    ['GET', `${repo}\\artifacts\\a\\content`, 'content-read'],
    ['GET', `${repo}/artifacts/a/content/..`, 'writer'],
    ['GET', `${repo}/artifacts/a/..%2Fcontent`, 'writer'],
    // No URL at all: the writer answers it 400.
    ['GET', 'http://[gw/x', 'writer'],
    // Without one, the scan: a word must be the whole segment.
    ['GET', `${repo}/artifacts/a/contentx`, 'writer'],
    ['GET', `${repo}/artifactsx/a/content`, 'writer'],
    ['GET', '/api/v1/repositories', 'writer'],
    ['GET', '/api/v1/repositories/r', 'writer'],
    ['GET', '/api/v1/repositories/r/artifacts', 'writer'],
    ['GET', '/api/v1/repositories/content', 'writer'],
    ['GET', `${repo}/artifacts/a/content#frag`, 'content-read'],
    ['GET', `${repo}/artifacts/a/content?x#frag`, 'content-read'],
    ['GET', `${repo}/artifacts/a/content#frag?x/y`, 'content-read'],
    ['GET', `${repo}/artifacts/a#/content`, 'writer'],
    // The absolute form (a proxy's request line) and anything not starting with / stay on the writer.
    ['GET', `http://gw${repo}/artifacts/a/content`, 'writer'],
    ['GET', 'xapi/v1/repositories/r/./artifacts/a/content', 'writer'],
    ['head', `${repo}/artifacts/a/content`, 'content-read'],
    ['Get', `${repo}/artifacts/a/content`, 'content-read'],
    ['GET', `${repo}/packages/p/1.0/apt/a/b`, 'writer'],
    ['GET', `${repo}/packages/p/1.0/apt`, 'writer'],
    ['GET', `${repo}/packages/p/1.0/apt/`, 'writer'],
    ['GET', `${repo}/packages/p/1.0/apt/Packages/content`, 'writer'],
    ['get', `${repo}/artifacts/a/content`, 'content-read'],
    ['OPTIONS', `${repo}/artifacts/a/content`, 'writer'],
    ['GET', `${repo}/artifacts/a`, 'writer'],
    ['GET', `${repo}/artifacts/a/content/extra`, 'writer'],
    ['GET', `${repo}/artifacts//content`, 'writer'],
    ['GET', `${repo}/packages/p/content`, 'writer'],
    ['GET', `${repo}/packages/p/1/assets/content`, 'writer'],
    ['GET', `${repo}/blobs/a/content`, 'writer'],
    ['GET', '/api/v1/repositories', 'writer'],
    ['GET', '/health/ready', 'writer'],
    ['GET', '/metrics', 'writer'],
    ['GET', '/console/', 'write'],
    ['GET', '/console', 'write'],
    ['GET', '/console/status?x', 'write'],
    ['GET', '/consoles', 'writer'],
    ['PUT', `${repo}/artifacts/a.bin`, 'write'],
    ['PUT', `${repo}/artifacts/a.bin/content`, 'write'],
    ['POST', `${repo}/artifacts/a.bin/uploads`, 'write'],
    ['DELETE', `${repo}/artifacts/a.bin`, 'write'],
    ['PATCH', `${repo}/artifacts/a.bin/content`, 'write'],
    ['PROPFIND', `${repo}/artifacts/a.bin/content`, 'write'],
  ])('%s %s → %s', (method, url, expected) => {
    expect(classifyRequest(method, url)).toBe(expected);
  });

  it('scans a path to the same answer as splitting it into segments', () => {
    const segment = fc.constantFrom(
      'api',
      'v1',
      'repositories',
      'r',
      'artifacts',
      'packages',
      'assets',
      'apt',
      'content',
      'Packages',
      '.',
      '..',
      '%2e',
      '%2E',
      '%2e%2e',
      '',
      'a%2Fb',
      '.x',
      'x.',
      'x2e',
      '%2x',
      'contentx',
      'artifacts2',
      'packagesx',
      'aptx',
      'assetsx',
    );
    const path = fc.oneof(
      fc.array(segment, { maxLength: 12 }).map((s) => `/${s.join('/')}`),
      fc.array(segment, { maxLength: 9 }).map((s) => `/api/v1/repositories/${s.join('/')}`),
      fc.array(segment, { maxLength: 9 }).map((s) => s.join('/')),
    );
    fc.assert(
      fc.property(path, (p) => {
        expect(isContentReadPath(p)).toBe(p.startsWith('/') && isContentReadSegments(p.slice(1).split('/')));
      }),
      { numRuns: 20_000 },
    );
  });

  it('scans route-shaped paths, and near misses of them, to the same answer as splitting them', () => {
    // Most paths the gateways serve are nearly content routes: each word right, or nearly, and a
    // dot segment here and there, so every check of both forms meets a path it decides.
    const word = (w: string) =>
      fc.oneof(
        { arbitrary: fc.constant(w), weight: 12 },
        { arbitrary: fc.constantFrom(`${w}x`, w.slice(0, -1), w.toUpperCase()), weight: 1 },
      );
    const name = fc.oneof(
      { arbitrary: fc.constantFrom('a', 'content', 'apt', 'assets', 'packages', 'a%2Fb'), weight: 12 },
      { arbitrary: fc.constantFrom('x2e', '%2x', ''), weight: 1 },
    );
    const shape = fc.oneof(
      fc.tuple(word('artifacts'), name, word('content')),
      fc.tuple(word('packages'), name, name, word('content')),
      fc.tuple(word('packages'), name, name, word('assets'), name, word('content')),
      fc.tuple(word('packages'), name, name, word('apt'), name),
    );
    const path = fc
      .record({
        head: fc.tuple(word('api'), word('v1'), word('repositories'), name),
        shape,
        dots: fc.array(fc.tuple(fc.nat(9), fc.constantFrom('.', '%2e', '%2E')), { maxLength: 2 }),
        end: fc.oneof(
          { arbitrary: fc.constant(''), weight: 6 },
          { arbitrary: fc.constantFrom('/', '/content', '/x'), weight: 1 },
        ),
      })
      .map(({ head, shape, dots, end }) => {
        const segments: string[] = [...head, ...shape];
        for (const [at, dot] of dots) segments.splice(Math.min(at, segments.length), 0, dot);
        return `/${segments.join('/')}${end}`;
      });
    let contentReads = 0;
    fc.assert(
      fc.property(path, (p) => {
        const expected = isContentReadSegments(p.slice(1).split('/'));
        if (expected) contentReads++;
        expect(isContentReadPath(p)).toBe(expected);
      }),
      { numRuns: 20_000 },
    );
    // The generator is worth its name only if it reaches content reads often.
    expect(contentReads).toBeGreaterThan(5000);
  });

  // classifyRequest hands these the path the gateway routes, its dot segments already resolved:
  // what they promise for a raw path is read from them directly.
  it.each([
    ['.', true],
    ['%2e', true],
    ['%2E', true],
    ['..', false],
    ['x2e', false],
    ['%3e', false],
    ['%2f', false],
    ['%2ex', false],
  ])('drops a %j segment before matching only when it is a dot segment (%s)', (segment, dropped) => {
    const segments = ['api', 'v1', 'repositories', 'r', segment, 'artifacts', 'a', 'content'];
    expect(isContentReadSegments(segments)).toBe(dropped);
    expect(isContentReadPath(`/${segments.join('/')}`)).toBe(dropped);
  });

  it('reads no path that does not start with /, with a dot segment or without', () => {
    expect(isContentReadSegments('api/v1/repositories/r/./artifacts/a/content'.split('/'))).toBe(true);
    expect(isContentReadPath('xapi/v1/repositories/r/./artifacts/a/content')).toBe(false);
    expect(isContentReadPath('xapi/v1/repositories/r/artifacts/a/content')).toBe(false);
  });

  it.each([
    ['GET', {}, true],
    ['HEAD', { 'content-length': '0' }, true],
    ['GET', { 'content-length': '5' }, false],
    ['GET', { 'transfer-encoding': 'chunked' }, false],
    ['PUT', {}, false],
    ['OPTIONS', {}, false],
    ['DELETE', {}, false],
  ])('isRetryable %s %j → %s', (method, headers, expected) => {
    expect(isRetryable(method, headers)).toBe(expected);
  });
});

describe('backend selection', () => {
  it('picks the least active, ties rotating from the cursor', () => {
    expect(pickLeastActive([], 0)).toBe(-1);
    expect(pickLeastActive([{ active: 0 }, { active: 0 }, { active: 0 }], 0)).toBe(0);
    expect(pickLeastActive([{ active: 0 }, { active: 0 }, { active: 0 }], 2)).toBe(2);
    expect(pickLeastActive([{ active: 2 }, { active: 1 }, { active: 1 }], 0)).toBe(1);
    expect(pickLeastActive([{ active: 2 }, { active: 1 }, { active: 1 }], 2)).toBe(2);
    expect(pickLeastActive([{ active: 0 }, { active: 3 }], 1)).toBe(0);
  });

  function pool(): BackendPool {
    const p = new BackendPool();
    p.update([
      { url: 'http://w:1', role: 'writer' },
      { url: 'http://r1:1', role: 'reader' },
      { url: 'http://r2:1', role: 'reader' },
    ]);
    for (const url of p.urls()) p.recordProbe(url, true, 'ok');
    return p;
  }

  it('spreads idle content reads round-robin over every healthy gateway, the writer included', () => {
    const p = pool();
    expect([1, 2, 3, 4, 5, 6].map(() => p.pick('content-read')!.url)).toEqual([
      'http://w:1',
      'http://r1:1',
      'http://r2:1',
      'http://w:1',
      'http://r1:1',
      'http://r2:1',
    ]);
  });

  it('sends content reads to the gateway with fewest requests in flight', () => {
    const p = pool();
    const releaseW = p.acquire('http://w:1');
    p.acquire('http://r1:1');
    expect(p.pick('content-read')!.url).toBe('http://r2:1');
    p.acquire('http://r2:1');
    releaseW();
    releaseW();
    expect(p.pick('content-read')!.url).toBe('http://w:1');
  });

  it('sends writes and everything else only to a healthy writer', () => {
    const p = pool();
    for (let i = 0; i < 3; i++) expect(p.pick('write')!.url).toBe('http://w:1');
    expect(p.pick('writer')!.url).toBe('http://w:1');
    expect(p.markUnreachable('http://w:1', 'refused')).toEqual({
      url: 'http://w:1',
      healthy: false,
      reason: 'refused',
    });
    expect(p.markUnreachable('http://w:1', 'refused')).toBeUndefined();
    expect(p.pick('write')).toBeUndefined();
    expect(p.pick('writer')).toBeUndefined();
    expect(p.hasHealthyWriter).toBe(false);
    expect(p.canServeReads).toBe(true);
    expect(new Set([1, 2, 3, 4].map(() => p.pick('content-read')!.url))).toEqual(
      new Set(['http://r1:1', 'http://r2:1']),
    );
  });

  it('skips the excluded backend on a retry and has none left when it was the only one', () => {
    const p = pool();
    for (let i = 0; i < 4; i++) expect(p.pick('content-read', new Set(['http://r1:1']))!.url).not.toBe('http://r1:1');
    expect(p.pick('write', new Set(['http://w:1']))).toBeUndefined();
  });

  it('adds new gateways unhealthy until a probe passes and drops undiscovered ones', () => {
    const p = pool();
    const change = p.update([
      { url: 'http://w:1', role: 'writer' },
      { url: 'http://r3:1', role: 'reader' },
    ]);
    expect(change).toEqual({ added: ['http://r3:1'], removed: ['http://r1:1', 'http://r2:1'] });
    expect(p.snapshot().map((b) => [b.url, b.healthy])).toEqual([
      ['http://w:1', true],
      ['http://r3:1', false],
    ]);
    expect(p.recordProbe('http://r3:1', true, 'ok')).toEqual({ url: 'http://r3:1', healthy: true, reason: 'ok' });
    expect(p.recordProbe('http://gone:1', false, 'x')).toBeUndefined();
    p.update([]);
    expect(p.canServeReads).toBe(false);
  });

  it('a late read of a gateway no longer known is not recorded: no orphan ejection counts against the bound', () => {
    let now = 0;
    const p = new BackendPool({
      outlier: { consecutive5xx: 1, baseEjectionMs: 30_000, maxEjectionPercent: 50 },
      now: () => now,
    });
    p.update([
      { url: 'http://w:1', role: 'writer' },
      { url: 'http://r1:1', role: 'reader' },
      { url: 'http://gone:1', role: 'reader' },
    ]);
    for (const url of p.urls()) p.recordProbe(url, true, 'ok');
    p.update([
      { url: 'http://w:1', role: 'writer' },
      { url: 'http://r1:1', role: 'reader' },
    ]);
    // A read that was in flight at the gateway that left fails after it left.
    expect(p.recordRead('http://gone:1', true)).toBeUndefined();
    now += 1;
    // The bound (half of two) is still there for a known one.
    expect(p.recordRead('http://r1:1', true)).toMatchObject({ url: 'http://r1:1' });
  });

  it('takes roles from lease rows and skips rows without an advertised URL', () => {
    expect(
      backendsFromLeases([
        { slot: 0, role: 'api', advertise_url: 'http://w:1' },
        { slot: 1, role: 'reader', advertise_url: 'http://r1:1' },
        { slot: 2, role: 'reader', advertise_url: null },
      ]),
    ).toEqual({
      backends: [
        { url: 'http://w:1', role: 'writer' },
        { url: 'http://r1:1', role: 'reader' },
      ],
      unadvertised: [2],
    });
  });
});

describe('origins', () => {
  it.each([
    ['http://10.0.0.5:8080', 'http://10.0.0.5:8080'],
    ['http://10.0.0.5:8080/', 'http://10.0.0.5:8080'],
    ['https://gw.example', 'https://gw.example'],
    ['http://[::1]:80', 'http://[::1]'],
  ])('accepts %s', (text, origin) => {
    expect(parseOrigin(text)).toEqual({ ok: true, value: origin });
  });
  it.each(['ftp://x', 'http://u:p@x:1', 'http://x:1/path', 'http://x:1/?q=1', 'http://x:1/#f', 'not a url'])(
    'refuses %s',
    (text) => {
      expect(parseOrigin(text).ok).toBe(false);
    },
  );
  it('parses a backend list, writer first, and refuses duplicates and empty lists', () => {
    expect(parseBackendList('http://a:1, http://b:2,')).toEqual({ ok: true, value: ['http://a:1', 'http://b:2'] });
    expect(parseBackendList('http://a:1,http://a:1/').ok).toBe(false);
    expect(parseBackendList(' , ').ok).toBe(false);
  });
});

describe('trusted proxies and the client address', () => {
  it.each([
    ['::ffff:10.0.0.1', '10.0.0.1'],
    ['10.0.0.1:5000', '10.0.0.1'],
    ['[2001:DB8::1]:443', '2001:db8::1'],
    ['"[::1]"', '::1'],
    ['unknown', undefined],
    ['_hidden', undefined],
    [' "[::1]" ', '::1'],
    // Only a whole bracketed, ported or quoted form is unwrapped: nothing is read out of the middle.
    ['x[::1]', undefined],
    ['[::1]:80x', undefined],
    ['::ffff:1.2.3.4:80', undefined],
    ['1.2.3.4:80x', undefined],
    ['12.3.4.5"', undefined],
    ['"12.3.4.5', undefined],
    ['"1.2.3.45', undefined],
    [undefined, undefined],
  ])('normalizeAddress(%s) → %s', (raw, expected) => {
    expect(normalizeAddress(raw)).toBe(expected);
  });

  it('parses IPs and CIDR blocks and names the bad entry', () => {
    expect(parseTrustedProxies(undefined)).toEqual({ ok: true, value: [] });
    expect(parseTrustedProxies('10.0.0.0/8, 127.0.0.1 ,::1, fd00::/8')).toEqual({
      ok: true,
      value: ['10.0.0.0/8', '127.0.0.1', '::1', 'fd00::/8'],
    });
    const bad = parseTrustedProxies('10.0.0.0/8,10.0.0.0/33');
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.problem).toContain('"10.0.0.0/33"');
    expect(parseTrustedProxies('localhost').ok).toBe(false);
  });

  it.each(['', '  ', 'none', ' none '])('reads %j as no trusted proxies', (text) =>
    expect(parseTrustedProxies(text)).toEqual({ ok: true, value: [] }),
  );

  it('takes every prefix length up to the family width, with spaces around an entry', () => {
    expect(parseTrustedProxies('10.0.0.0/16 , 192.0.2.1/32,fd00::/64, ::1/128')).toEqual({
      ok: true,
      value: ['10.0.0.0/16', '192.0.2.1/32', 'fd00::/64', '::1/128'],
    });
  });

  it.each(['::/129', '10.0.0.0/8/9', '/8', 'a/10.0.0.0/8', '10.0.0.0/8x', '10.0.0.0/1234'])('refuses %j', (entry) => {
    const parsed = parseTrustedProxies(`127.0.0.1, ${entry}`);
    expect(parsed.ok).toBe(false);
    expect(!parsed.ok && parsed.problem).toContain(JSON.stringify(entry));
  });

  it('trusts no one from an empty list, nor a peer whose address cannot be read', () => {
    const empty = createTrustedProxies([]);
    expect(empty.entries).toEqual([]);
    expect(empty.isTrusted('127.0.0.1')).toBe(false);
    const list = createTrustedProxies(['127.0.0.1', '::1']);
    expect(list.entries).toEqual(['127.0.0.1', '::1']);
    expect(list.isTrusted('garbage')).toBe(false);
    expect(list.isTrusted('')).toBe(false);
    // A socket that has no address any more (closed) is the client itself: its header is not read.
    expect(clientAddressFrom(undefined, '6.6.6.6', list)).toBe('');
    expect(clientAddressFrom('garbage', '6.6.6.6', list)).toBe('garbage');
  });

  const trusted = createTrustedProxies(['127.0.0.1', '10.0.0.0/8', 'fd00::/8']);
  it.each([
    ['peer not trusted: headers ignored', '203.0.113.9', '1.2.3.4', [], '203.0.113.9'],
    ['no trusted proxies at all', '127.0.0.1', '1.2.3.4', 'none', '127.0.0.1'],
    ['one trusted hop', '127.0.0.1', '198.51.100.7', [], '198.51.100.7'],
    ['mapped IPv4 peer', '::ffff:127.0.0.1', '198.51.100.7', [], '198.51.100.7'],
    ['spoofed left part is skipped', '127.0.0.1', '6.6.6.6, 198.51.100.7', [], '198.51.100.7'],
    ['two trusted hops', '127.0.0.1', '198.51.100.7, 10.1.2.3', [], '198.51.100.7'],
    ['all hops trusted: leftmost', '127.0.0.1', '10.0.0.2, 10.1.2.3', [], '10.0.0.2'],
    ['trusted peer without header', '127.0.0.1', undefined, [], '127.0.0.1'],
    ['garbage stops at the proxy that passed it', '127.0.0.1', '198.51.100.7, garbage', [], '127.0.0.1'],
    ['repeated headers joined', '127.0.0.1', ['6.6.6.6', '198.51.100.8'], [], '198.51.100.8'],
    // Empty list elements are no hops (RFC 9110, section 5.6.1).
    ['empty elements skipped', '127.0.0.1', '198.51.100.7, , 10.1.2.3,', [], '198.51.100.7'],
    ['IPv6 trusted block', 'fd00::5', '2001:db8::9', [], '2001:db8::9'],
  ] as const)('%s', (_name, peer, xff, mode, expected) => {
    const list = mode === 'none' ? createTrustedProxies([]) : trusted;
    expect(clientAddressFrom(peer, xff as string | string[] | undefined, list)).toBe(expected);
  });

  it('clientAddress reads the socket and X-Forwarded-For of a request', () => {
    const req = {
      socket: { remoteAddress: '127.0.0.1' },
      headers: { 'x-forwarded-for': '198.51.100.7' },
    } as unknown as Parameters<typeof clientAddress>[0];
    expect(clientAddress(req, trusted)).toBe('198.51.100.7');
    expect(clientAddress(req, createTrustedProxies([]))).toBe('127.0.0.1');
  });

  it('reads the for= nodes of Forwarded: quoted, with ports, any case, one per element, unknown where none can be read', () => {
    expect(
      forwardedForNodes(
        'for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711", for=unknown, proto=https',
      ),
    ).toEqual(['192.0.2.60', '[2001:db8:cafe::17]:4711', 'unknown', 'unknown']);
    // A quoted value may hold the separators; two lines of the header are one list.
    expect(forwardedForNodes('host="a,b;c";for=198.51.100.7, for="x\\"y"')).toEqual(['198.51.100.7', 'x"y']);
    expect(forwardedForNodes(['for=198.51.100.1', 'for=198.51.100.2'])).toEqual(['198.51.100.1', '198.51.100.2']);
    // Two for= in an element, an unclosed quote: nothing to believe. Empty elements are no hops.
    expect(forwardedForNodes('for=1.1.1.1;for=2.2.2.2, for="3.3.3.3')).toEqual(['unknown', 'unknown']);
    expect(forwardedForNodes(' , for=198.51.100.7,')).toEqual(['198.51.100.7']);
    expect(forwardedForNodes('')).toEqual([]);
    expect(forwardedForNodes(undefined)).toEqual([]);
    // An escaped quote does not end the quoted string: the comma after it is inside.
    expect(forwardedForNodes('for="a\\",b";by=x')).toEqual(['a",b']);
    // A lone quote is unclosed; an empty quoted string is an empty value (no address either).
    expect(forwardedForNodes('for="')).toEqual(['unknown']);
    expect(forwardedForNodes('for=""')).toEqual(['']);
    // Spaces around `=` are dropped before a quoted value is read; a pair without `=` names nothing.
    expect(forwardedForNodes('for= "192.0.2.1"')).toEqual(['192.0.2.1']);
    expect(forwardedForNodes('forx;for=192.0.2.2')).toEqual(['192.0.2.2']);
  });

  it('reads X-Forwarded-For when a request has it, else Forwarded, else nothing', () => {
    expect(forwardingHops({ 'x-forwarded-for': '198.51.100.7', forwarded: 'for=6.6.6.6' })).toEqual(['198.51.100.7']);
    expect(forwardingHops({ forwarded: 'for=6.6.6.6, for=198.51.100.7' })).toEqual(['6.6.6.6', '198.51.100.7']);
    expect(forwardingHops({ 'x-forwarded-for': '' })).toEqual([]);
    expect(forwardingHops({})).toBeUndefined();
  });

  it.each([
    ['one trusted hop', '127.0.0.1', 'for=198.51.100.7;proto=http', '198.51.100.7'],
    ['spoofed left part is skipped', '127.0.0.1', 'for=6.6.6.6, for=198.51.100.7', '198.51.100.7'],
    ['two trusted hops', '127.0.0.1', 'for=198.51.100.7, for=10.1.2.3', '198.51.100.7'],
    ['quoted IPv6 with a port', '127.0.0.1', 'for="[2001:db8::1]:4711"', '2001:db8::1'],
    ['IPv4 with a port', '127.0.0.1', 'for="198.51.100.7:4711"', '198.51.100.7'],
    ['obfuscated node stops at the proxy', '127.0.0.1', 'for=198.51.100.7, for=_hidden', '127.0.0.1'],
    ['unknown stops at the proxy', '127.0.0.1', 'for=198.51.100.7, for=unknown', '127.0.0.1'],
    ['element without for= stops at the proxy', '127.0.0.1', 'for=198.51.100.7, proto=https', '127.0.0.1'],
    ['peer not trusted: header ignored', '203.0.113.9', 'for=1.2.3.4', '203.0.113.9'],
  ] as const)('Forwarded alone: %s', (_name, peer, forwarded, expected) => {
    const req = { socket: { remoteAddress: peer }, headers: { forwarded } } as unknown as Parameters<
      typeof clientAddress
    >[0];
    expect(clientAddress(req, trusted)).toBe(expected);
  });

  it('reads from the Forwarded a router writes the hops of its X-Forwarded-For, whatever the Host', () => {
    const everyone = createTrustedProxies(['0.0.0.0/0', '::/0']);
    const node = (a: string) => (a.includes(':') ? `"[${a}]:443"` : a);
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.ipV4(), fc.ipV6()), { minLength: 1, maxLength: 4 }),
        fc.string({ minLength: 1 }),
        (chain, host) => {
          const prior = chain.slice(0, -1);
          const raw = ['host', host.replace(/[\r\n\0]/g, 'h')];
          if (prior.length > 0)
            raw.push('x-forwarded-for', prior.join(', '), 'forwarded', prior.map((a) => `for=${node(a)}`).join(', '));
          const headers: IncomingHttpHeaders = {};
          for (let i = 0; i < raw.length; i += 2) headers[raw[i]!] = raw[i + 1]!;
          const out = buildUpstreamHeaders({
            rawHeaders: raw,
            headers,
            remoteAddress: chain.at(-1)!,
            encrypted: false,
            trusted: everyone,
            requestId: 'r',
          });
          const sent = (name: string) => out[out.indexOf(name) + 1];
          const viaForwarded = forwardingHops({ forwarded: sent('forwarded') })!;
          expect(viaForwarded.map(normalizeAddress)).toEqual(chain.map(normalizeAddress));
          expect(viaForwarded.map(normalizeAddress)).toEqual(
            forwardingHops({ 'x-forwarded-for': sent('x-forwarded-for') })!.map(normalizeAddress),
          );
        },
      ),
    );
  });
});

describe('requestScheme: the scheme a request arrived with', () => {
  const trusted = createTrustedProxies(['10.0.0.1']);
  const scheme = (peer: string, encrypted: boolean, headers: IncomingHttpHeaders) =>
    requestScheme(
      { socket: { remoteAddress: peer, encrypted }, headers } as unknown as Parameters<typeof requestScheme>[0],
      trusted,
    );

  it("is the listener's own without a trusted proxy, whatever the peer says", () => {
    for (const headers of [
      {},
      { 'x-forwarded-proto': 'https' },
      { 'x-forwarded-proto': 'http' },
      { forwarded: 'for=192.0.2.7;proto=https' },
      { forwarded: 'for=192.0.2.7;proto=http' },
    ]) {
      expect(scheme('192.0.2.9', false, headers), JSON.stringify(headers)).toEqual({
        scheme: 'http',
        fromProxy: false,
      });
      expect(scheme('192.0.2.9', true, headers), JSON.stringify(headers)).toEqual({
        scheme: 'https',
        fromProxy: false,
      });
    }
    // A socket that has no address any more is no proxy either.
    expect(scheme(undefined as unknown as string, false, { 'x-forwarded-proto': 'https' }).scheme).toBe('http');
  });

  it('behind a trusted proxy: the last X-Forwarded-Proto entry (its own), whatever its own hop to us was', () => {
    expect(scheme('10.0.0.1', true, { 'x-forwarded-proto': 'http' })).toEqual({ scheme: 'http', fromProxy: true });
    expect(scheme('10.0.0.1', false, { 'x-forwarded-proto': ' HTTPS ' })).toEqual({ scheme: 'https', fromProxy: true });
    expect(scheme('::ffff:10.0.0.1', false, { 'x-forwarded-proto': 'http, https' }).scheme).toBe('https');
    expect(scheme('10.0.0.1', true, { 'x-forwarded-proto': 'https,http' }).scheme).toBe('http');
    expect(scheme('10.0.0.1', true, { 'x-forwarded-proto': ['https', 'http'] }).scheme).toBe('http');
    // Empty list elements are no entries (RFC 9110, section 5.6.1).
    expect(scheme('10.0.0.1', false, { 'x-forwarded-proto': 'https, ' }).scheme).toBe('https');
    // X-Forwarded-Proto wins over Forwarded, unless Forwarded says http: a proxy that sets one
    // passes the other on as its client wrote it, and a client must not unsay its proxy's `http`.
    expect(scheme('10.0.0.1', false, { 'x-forwarded-proto': 'http', forwarded: 'proto=https' }).scheme).toBe('http');
    expect(scheme('10.0.0.1', true, { 'x-forwarded-proto': 'https', forwarded: 'for=192.0.2.7;proto=http' })).toEqual({
      scheme: 'http',
      fromProxy: true,
    });
    expect(scheme('10.0.0.1', true, { 'x-forwarded-proto': 'wss', forwarded: 'proto=http' }).scheme).toBe('http');
    // Only its own (last) Forwarded element: an `http` further left is its client's word.
    expect(
      scheme('10.0.0.1', false, { 'x-forwarded-proto': 'https', forwarded: 'proto=http, proto=https' }).scheme,
    ).toBe('https');
  });

  it('behind a trusted proxy that sends no X-Forwarded-Proto: the proto= of its own (the last) Forwarded element', () => {
    expect(scheme('10.0.0.1', false, { forwarded: 'for=192.0.2.7;proto=https' })).toEqual({
      scheme: 'https',
      fromProxy: true,
    });
    expect(scheme('10.0.0.1', true, { forwarded: 'for=192.0.2.7;Proto="HTTP";host=a' }).scheme).toBe('http');
    expect(scheme('10.0.0.1', true, { forwarded: 'for=192.0.2.1;proto=https, for=192.0.2.7;proto=http' }).scheme).toBe(
      'http',
    );
    // Its own element says none: an earlier one is not its word.
    expect(scheme('10.0.0.1', false, { forwarded: 'for=192.0.2.1;proto=https, for=192.0.2.7' })).toEqual({
      scheme: 'http',
      fromProxy: false,
    });
    expect(scheme('10.0.0.1', false, { 'x-forwarded-proto': '', forwarded: 'proto=https' }).scheme).toBe('https');
  });

  it('reads proto= as RFC 7239 writes a pair: blanks around it and its `=` dropped, a pair without `=` naming nothing', () => {
    for (const forwarded of [
      'for=192.0.2.7; proto=https',
      'for=192.0.2.7;proto = https',
      'for=192.0.2.7;proto= "https"',
      'for=192.0.2.7;protox;proto=https',
    ])
      expect(scheme('10.0.0.1', false, { forwarded }), forwarded).toEqual({ scheme: 'https', fromProxy: true });
  });

  it("a word other than http or https says nothing: the listener's own scheme stands", () => {
    for (const headers of [
      { 'x-forwarded-proto': 'wss' },
      { 'x-forwarded-proto': 'https, ftp' },
      { 'x-forwarded-proto': 'https x' },
      { forwarded: 'for=192.0.2.7;proto=gopher' },
      { forwarded: 'for=192.0.2.7;proto="https' },
      // A word X-Forwarded-Proto does not say is not taken from Forwarded instead.
      { 'x-forwarded-proto': 'wss', forwarded: 'proto=https' },
    ]) {
      expect(scheme('10.0.0.1', false, headers), JSON.stringify(headers)).toEqual({ scheme: 'http', fromProxy: false });
      expect(scheme('10.0.0.1', true, headers), JSON.stringify(headers)).toEqual({ scheme: 'https', fromProxy: false });
    }
  });
});

describe('forwardedPrefix: the path a trusted proxy publishes the gateway under', () => {
  const trusted = createTrustedProxies(['10.0.0.1']);
  const prefix = (peer: string, value: string | string[] | undefined) =>
    forwardedPrefix(
      {
        socket: { remoteAddress: peer },
        headers: value === undefined ? {} : { 'x-forwarded-prefix': value },
      } as unknown as Parameters<typeof forwardedPrefix>[0],
      trusted,
    );

  it("is a trusted proxy's X-Forwarded-Prefix, without its last slash", () => {
    expect(prefix('10.0.0.1', '/arkvory')).toBe('/arkvory');
    expect(prefix('::ffff:10.0.0.1', '/arkvory/')).toBe('/arkvory');
    expect(prefix('10.0.0.1', ' /tools/arkvory.v2~x_y ')).toBe('/tools/arkvory.v2~x_y');
    expect(prefix('10.0.0.1', '/')).toBe('');
    expect(prefix('10.0.0.1', '')).toBe('');
    expect(prefix('10.0.0.1', undefined)).toBe('');
  });

  it('is nothing from a peer that is no trusted proxy, whatever it says', () => {
    expect(prefix('192.0.2.9', '/arkvory')).toBe('');
    expect(prefix(undefined as unknown as string, '/arkvory')).toBe('');
    // Nor from a request whose socket is gone (node:http may null it).
    const detached = { socket: null, headers: { 'x-forwarded-prefix': '/arkvory' } };
    expect(forwardedPrefix(detached as unknown as Parameters<typeof forwardedPrefix>[0], trusted)).toBe('');
  });

  it('says nothing when it is not a plain path prefix: the gateway never puts a host, a query or a climb in a link', () => {
    for (const value of [
      'arkvory',
      '//evil.example',
      '/a//b',
      '/a/../b',
      '/..',
      '/.',
      '/a?x=1',
      '/a#x',
      '/a%2Fb',
      '/a b',
      '/a, /b',
      'https://evil.example/a',
      '/a\\b',
      `/${'a'.repeat(256)}`,
      ['/a', '/b'],
    ]) {
      expect(prefix('10.0.0.1', value), JSON.stringify(value)).toBe('');
    }
    expect(prefix('10.0.0.1', `/${'a'.repeat(255)}`)).toBe(`/${'a'.repeat(255)}`);
  });
});

describe('forwardedHost: the host a trusted proxy says its client asked for', () => {
  const trusted = createTrustedProxies(['10.0.0.1']);
  const host = (peer: string, headers: IncomingHttpHeaders) =>
    forwardedHost(
      { socket: { remoteAddress: peer }, headers } as unknown as Parameters<typeof forwardedHost>[0],
      trusted,
    );

  it("is the last entry of a trusted proxy's X-Forwarded-Host, else its own Forwarded element's host=", () => {
    expect(host('10.0.0.1', { 'x-forwarded-host': 'tools.example.com' })).toBe('tools.example.com');
    expect(host('10.0.0.1', { 'x-forwarded-host': 'evil.example, tools.example.com:8443 ' })).toBe(
      'tools.example.com:8443',
    );
    expect(
      host('10.0.0.1', { forwarded: 'for=192.0.2.1;host=evil.example, for=192.0.2.7;host="[2001:db8::1]:8443"' }),
    ).toBe('[2001:db8::1]:8443');
    expect(host('10.0.0.1', { forwarded: 'for=192.0.2.7;host=a.example', 'x-forwarded-host': 'A.example' })).toBe(
      'A.example',
    );
    expect(host('10.0.0.1', {})).toBeUndefined();
    expect(host('10.0.0.1', { forwarded: 'for=192.0.2.7;proto=https' })).toBeUndefined();
  });

  it('reads host= as RFC 7239 writes a pair: blanks around it and its `=` dropped, a pair without `=` naming nothing', () => {
    expect(host('10.0.0.1', { forwarded: 'for=192.0.2.7; host=a.example' })).toBe('a.example');
    expect(host('10.0.0.1', { forwarded: 'for=192.0.2.7;Host = "a.example:8443"' })).toBe('a.example:8443');
    expect(host('10.0.0.1', { forwarded: 'for=192.0.2.7;hostx;host=a.example' })).toBe('a.example');
  });

  it('takes an empty X-Forwarded-Host for none: the Forwarded host= stands', () => {
    expect(host('10.0.0.1', { 'x-forwarded-host': '', forwarded: 'for=192.0.2.7;host=a.example' })).toBe('a.example');
    expect(host('10.0.0.1', { 'x-forwarded-host': ' ' })).toBeUndefined();
  });

  it('is nothing from a request whose socket is gone (node:http may null it)', () => {
    const detached = { socket: null, headers: { 'x-forwarded-host': 'tools.example.com' } };
    expect(forwardedHost(detached as unknown as Parameters<typeof forwardedHost>[0], trusted)).toBeUndefined();
  });

  it('is nothing from a peer that is no trusted proxy, when the two headers disagree, or when it is no plain authority', () => {
    expect(host('192.0.2.9', { 'x-forwarded-host': 'evil.example' })).toBeUndefined();
    expect(host('192.0.2.9', { forwarded: 'for=192.0.2.7;host=evil.example' })).toBeUndefined();
    expect(
      host('10.0.0.1', { forwarded: 'for=192.0.2.7;host=tools.example.com', 'x-forwarded-host': 'evil.example' }),
    ).toBeUndefined();
    for (const value of [
      'evil.example/x',
      'user@evil.example',
      'evil.example:',
      'evil.example:123456',
      'evil .example',
      '-evil.example',
      '[evil]',
      'evil.example?',
      'tools.example.com,',
      `${'a'.repeat(250)}.example`,
    ])
      expect(host('10.0.0.1', { 'x-forwarded-host': value }), value).toBeUndefined();
  });
});

describe('isAuthorityText: what may stand as the authority of a link', () => {
  it('takes host names of labels of any length, a trailing dot, IP addresses and a port', () => {
    for (const text of ['a.example', 'git.a.example.org', 'x.y.z', 'example.org.', '192.0.2.1:8080', '[::1]:443'])
      expect(isAuthorityText(text), text).toBe(true);
  });

  it('takes at most 255 characters', () => {
    const name = (length: number) => `${'a'.repeat(length - '.example'.length)}.example`;
    expect(isAuthorityText(name(255))).toBe(true);
    expect(isAuthorityText(name(256))).toBe(false);
  });
});

describe('buildUpstreamHeaders', () => {
  const none = createTrustedProxies([]);
  /** A raw head (`req.rawHeaders`) and the object node:http parses from it (`req.headers`). */
  function head(raw: string[]): { rawHeaders: string[]; headers: IncomingHttpHeaders } {
    const headers: IncomingHttpHeaders = {};
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!.toLowerCase();
      const prior = headers[name];
      headers[name] = prior === undefined ? raw[i + 1]! : `${prior}, ${raw[i + 1]!}`;
    }
    return { rawHeaders: raw, headers };
  }
  const base = [
    'Authorization',
    'Bearer k',
    'Range',
    'bytes=0-9',
    'If-Range',
    '"e"',
    'if-none-match',
    '"e"',
    'Host',
    'files.example:8080',
    'Content-Length',
    '10',
  ];

  it('keeps end-to-end headers in order and as spelled, drops hop-by-hop ones and appends the forwarding headers', () => {
    const out = buildUpstreamHeaders({
      ...head([
        ...base,
        'Connection',
        'keep-alive, X-Hop',
        'X-Hop',
        '1',
        'Keep-Alive',
        'timeout=5',
        'Expect',
        '100-continue',
        'TE',
        'trailers',
        'Proxy-Authorization',
        'x',
        'Proxy-Connection',
        'keep-alive',
        'Upgrade',
        'h2c',
        'Trailer',
        'x-t',
        'X-Forwarded-For',
        '6.6.6.6',
        'Forwarded',
        'for=6.6.6.6',
        'X-Forwarded-Proto',
        'https',
        'X-Forwarded-Host',
        'evil.example',
        'X-Request-Id',
        'planted',
      ]),
      remoteAddress: '::ffff:198.51.100.7',
      encrypted: false,
      trusted: none,
      requestId: 'req-1',
    });
    expect(out).toEqual([
      ...base,
      'x-forwarded-for',
      '198.51.100.7',
      'forwarded',
      'for=198.51.100.7;proto=http;host="files.example:8080"',
      'x-forwarded-proto',
      'http',
      'x-forwarded-host',
      'files.example:8080',
      'x-request-id',
      'req-1',
    ]);
  });

  it('drops every header the Connection header names, in any case, and keeps duplicates in order', () => {
    const out = buildUpstreamHeaders({
      ...head([
        'host',
        'h',
        'connection',
        'close',
        'Connection',
        'X-One ,x-TWO',
        'x-one',
        'a',
        'Cookie',
        'a=1',
        'X-Two',
        'b',
        'cookie',
        'b=2',
        'Accept',
        'x/y',
        'Accept',
        'z/w',
      ]),
      remoteAddress: '127.0.0.1',
      encrypted: true,
      trusted: none,
      requestId: 'r',
    });
    expect(out).toEqual([
      'host',
      'h',
      'Cookie',
      'a=1',
      'cookie',
      'b=2',
      'Accept',
      'x/y',
      'Accept',
      'z/w',
      'x-forwarded-for',
      '127.0.0.1',
      'forwarded',
      'for=127.0.0.1;proto=https;host=h',
      'x-forwarded-proto',
      'https',
      'x-forwarded-host',
      'h',
      'x-request-id',
      'r',
    ]);
  });

  it("passes on the entry a trusted proxy wrote itself (the last) of its X-Forwarded-Host, the same in Forwarded's host=", () => {
    const trusted = createTrustedProxies(['127.0.0.2']);
    const out = buildUpstreamHeaders({
      ...head(['host', 'internal:8080', 'X-Forwarded-Host', 'evil.example, tools.example.com']),
      remoteAddress: '127.0.0.2',
      encrypted: false,
      trusted,
      requestId: 'r',
    });
    const sent = (name: string) => out[out.indexOf(name) + 1];
    expect(sent('x-forwarded-host')).toBe('tools.example.com');
    expect(sent('forwarded')).toBe('for=127.0.0.2;proto=http;host=tools.example.com');
  });

  it("carries a trusted proxy's Forwarded-only chain into X-Forwarded-For, so both name the same hops", () => {
    const trusted = createTrustedProxies(['127.0.0.2']);
    const build = (forwarded: string) =>
      buildUpstreamHeaders({
        ...head(['host', 'h', 'Forwarded', forwarded]),
        remoteAddress: '127.0.0.2',
        encrypted: false,
        trusted,
        requestId: 'r',
      });
    const sent = (out: string[], name: string) => out[out.indexOf(name) + 1];
    const out = build('for=6.6.6.6, for="[2001:DB8::1]:4711";proto=https');
    expect(sent(out, 'x-forwarded-for')).toBe('6.6.6.6, 2001:db8::1, 127.0.0.2');
    expect(sent(out, 'forwarded')).toBe(
      'for=6.6.6.6, for="[2001:DB8::1]:4711";proto=https, for=127.0.0.2;proto=https;host=h',
    );
    // A node that names no address stays one that stops the walk, in either header.
    expect(sent(build('for=198.51.100.7, for=_hidden'), 'x-forwarded-for')).toBe('198.51.100.7, unknown, 127.0.0.2');
    expect(sent(build('proto=https'), 'x-forwarded-for')).toBe('unknown, 127.0.0.2');
    // A Forwarded of empty elements names no hop: the chain starts at the proxy.
    expect(sent(build(' , '), 'x-forwarded-for')).toBe('127.0.0.2');
    // The gateway behind, trusting router and proxy, finds the proxy's client either way.
    const behind = createTrustedProxies(['127.0.0.1', '127.0.0.2']);
    const req = {
      socket: { remoteAddress: '127.0.0.1' },
      headers: { 'x-forwarded-for': sent(out, 'x-forwarded-for') },
    };
    expect(clientAddress(req as unknown as Parameters<typeof clientAddress>[0], behind)).toBe('2001:db8::1');
  });

  it("takes the client's scheme from a trusted proxy's own Forwarded element when it sends no X-Forwarded-Proto", () => {
    const trusted = createTrustedProxies(['127.0.0.2']);
    const proto = (raw: string[], remoteAddress = '127.0.0.2') => {
      const out = buildUpstreamHeaders({
        ...head(['host', 'h', ...raw]),
        remoteAddress,
        encrypted: false,
        trusted,
        requestId: 'r',
      });
      return [out[out.indexOf('x-forwarded-proto') + 1], out[out.indexOf('forwarded') + 1]!.split(', ').at(-1)];
    };
    expect(proto(['Forwarded', 'for=198.51.100.7;Proto="HTTPS"'])).toEqual([
      'https',
      'for=127.0.0.2;proto=https;host=h',
    ]);
    // Only the proxy's own (last) element counts; a proto the client wrote further left does not.
    expect(proto(['Forwarded', 'for=6.6.6.6;proto=https, for=198.51.100.7'])[0]).toBe('http');
    expect(proto(['Forwarded', 'for=198.51.100.7;proto=gopher'])[0]).toBe('http');
    // The proxy's X-Forwarded-Proto still wins, and an untrusted peer's Forwarded says nothing.
    expect(proto(['Forwarded', 'for=198.51.100.7;proto=https', 'X-Forwarded-Proto', 'http'])[0]).toBe('http');
    expect(proto(['Forwarded', 'for=198.51.100.7;proto=https'], '203.0.113.9')[0]).toBe('http');
    // Read as a gateway reads it (requestScheme): the proxy's own, last X-Forwarded-Proto entry, and
    // only http or https; not its whole list passed on, nor a word of its own put in Forwarded.
    expect(proto(['X-Forwarded-Proto', 'http, https'])).toEqual(['https', 'for=127.0.0.2;proto=https;host=h']);
    expect(proto(['X-Forwarded-Proto', 'https, http'])[0]).toBe('http');
    expect(proto(['X-Forwarded-Proto', 'wss'])).toEqual(['http', 'for=127.0.0.2;proto=http;host=h']);
  });

  it("passes a trusted proxy's X-Forwarded-Prefix on and drops anyone else's", () => {
    const trusted = createTrustedProxies(['127.0.0.2']);
    const sentPrefix = (remoteAddress: string) => {
      const out = buildUpstreamHeaders({
        ...head(['host', 'h', 'X-Forwarded-Prefix', '/arkvory']),
        remoteAddress,
        encrypted: false,
        trusted,
        requestId: 'r',
      });
      // Every value sent under that name, in any case.
      return out.flatMap((name, i) => (i % 2 === 0 && name.toLowerCase() === 'x-forwarded-prefix' ? [out[i + 1]] : []));
    };
    expect(sentPrefix('127.0.0.2')).toEqual(['/arkvory']);
    expect(sentPrefix('203.0.113.9')).toEqual([]);
  });

  it('extends the chain of a trusted proxy (two X-Forwarded-For in order) and quotes IPv6 in Forwarded', () => {
    const trusted = createTrustedProxies(['::1']);
    const out = buildUpstreamHeaders({
      ...head([
        'host',
        'h',
        'X-Forwarded-For',
        '203.0.113.9',
        'x-forwarded-for',
        '198.51.100.7',
        'forwarded',
        'for=198.51.100.7',
        'x-forwarded-proto',
        'https',
        'x-forwarded-host',
        'public.example',
      ]),
      remoteAddress: '::1',
      encrypted: false,
      trusted,
      requestId: 'r',
    });
    expect(out).toEqual([
      'host',
      'h',
      'x-forwarded-for',
      '203.0.113.9, 198.51.100.7, ::1',
      'forwarded',
      'for=198.51.100.7, for="[::1]";proto=https;host=public.example',
      'x-forwarded-proto',
      'https',
      'x-forwarded-host',
      'public.example',
      'x-request-id',
      'r',
    ]);
  });

  it('keeps per-connection work on the socket it is given, and recomputes when the Host changes', () => {
    const socket = {};
    const input = (host: string, id: string) => ({
      ...head(['Host', host]),
      remoteAddress: '10.0.0.5',
      encrypted: false,
      trusted: none,
      requestId: id,
    });
    const first = buildUpstreamHeaders(input('a.example', '1'), socket);
    expect(buildUpstreamHeaders(input('a.example', '2'), socket)).toEqual([...first.slice(0, -1), '2']);
    expect(buildUpstreamHeaders(input('b b', '3'), socket)).toContain('for=10.0.0.5;proto=http;host="b b"');
    // A request without Host (HTTP/1.0): no host in Forwarded, no X-Forwarded-Host.
    expect(
      buildUpstreamHeaders(
        { ...head([]), remoteAddress: undefined, encrypted: false, trusted: none, requestId: 'x' },
        socket,
      ),
    ).toEqual([
      'x-forwarded-for',
      'unknown',
      'forwarded',
      'for=unknown;proto=http',
      'x-forwarded-proto',
      'http',
      'x-request-id',
      'x',
    ]);
  });

  it("does not reuse a connection's work once its TLS or the trusted list differs", () => {
    const socket = {};
    const input = (encrypted: boolean, trusted: ReturnType<typeof createTrustedProxies>) => ({
      ...head(['Host', 'a.example', 'X-Forwarded-For', '198.51.100.7']),
      remoteAddress: '10.0.0.5',
      encrypted,
      trusted,
      requestId: 'r',
    });
    expect(buildUpstreamHeaders(input(false, none), socket)).toContain('for=10.0.0.5;proto=http;host=a.example');
    expect(buildUpstreamHeaders(input(true, none), socket)).toContain('for=10.0.0.5;proto=https;host=a.example');
    // A reloaded list that now trusts the peer extends its chain instead of replacing it.
    const reloaded = createTrustedProxies(['10.0.0.0/8']);
    expect(buildUpstreamHeaders(input(true, reloaded), socket)).toContain('198.51.100.7, 10.0.0.5');
  });

  it('quotes a Host that is no token in Forwarded, escaping quotes and backslashes', () => {
    const out = buildUpstreamHeaders({
      ...head(['Host', 'a"b\\c']),
      remoteAddress: '10.0.0.5',
      encrypted: false,
      trusted: none,
      requestId: 'r',
    });
    expect(out).toContain('for=10.0.0.5;proto=http;host="a\\"b\\\\c"');
  });

  it('strips hop-by-hop response headers and those Connection names, keeps duplicates and the byte semantics', () => {
    const raw = [
      'Connection',
      'keep-alive, X-Upstream-Hop',
      'Keep-Alive',
      'timeout=5',
      'Transfer-Encoding',
      'chunked',
      'x-upstream-hop',
      '1',
      'Proxy-Connection',
      'close',
      'Upgrade',
      'h2c',
      'Trailer',
      'x',
      'ETag',
      '"e"',
      'Content-Range',
      'bytes 0-9/20',
      'Content-Length',
      '10',
      'Accept-Ranges',
      'bytes',
      'Set-Cookie',
      'a=1',
      'set-cookie',
      'b=2',
    ];
    const kept = ['ETag', '"e"', 'Content-Range', 'bytes 0-9/20', 'Content-Length', '10', 'Accept-Ranges', 'bytes'];
    const cookies = ['Set-Cookie', 'a=1', 'set-cookie', 'b=2'];
    expect(responseHeaderList(raw, 'keep-alive, X-Upstream-Hop', 'id-1')).toEqual([
      ...kept,
      ...cookies,
      'x-request-id',
      'id-1',
    ]);
    // The gateway's x-request-id (the router's id it was sent) is replaced by the client's, not doubled.
    expect(responseHeaderList(['X-Request-Id', 'g', 'Connection', 'keep-alive'], 'keep-alive', 'id-1')).toEqual([
      'x-request-id',
      'id-1',
    ]);
  });

  it('classifies header names in any case by their length first', () => {
    for (const name of [
      'connection',
      'Keep-Alive',
      'PROXY-CONNECTION',
      'Proxy-Authorization',
      'te',
      'Trailer',
      'upgrade',
      'Expect',
    ])
      expect(requestHeaderKind(name), name).toBe(RequestHeader.Drop);
    for (const name of ['X-Forwarded-For', 'forwarded', 'x-forwarded-proto', 'X-Forwarded-Host', 'X-Request-ID'])
      expect(requestHeaderKind(name), name).toBe(RequestHeader.Forwarding);
    for (const name of [
      'User-Agent',
      'Accept',
      'Content-Type',
      'Accept-Encoding',
      'tE2',
      'x-forwarded-fox',
      'Host',
      '',
      // Names of the same length as one dropped or set by the router, one letter off.
      'Referer',
      'Warning',
      'tx',
      'expecx',
      'upgradx',
      'trailex',
      'forwardex',
      'connectiox',
      'keep-alivx',
      'x-request-ix',
      'x-forwarded-hosx',
      'proxy-connectiox',
      'x-forwarded-protx',
      'proxy-authorizatiox',
    ])
      expect(requestHeaderKind(name), name).toBe(RequestHeader.Keep);
    for (const name of [
      'Transfer-Encoding',
      'connection',
      'KEEP-ALIVE',
      'TE',
      'upgrade',
      'Trailer',
      'Proxy-Connection',
    ])
      expect(isHopByHopResponse(name), name).toBe(true);
    for (const name of [
      'Content-Length',
      'ETag',
      'Set-Cookie',
      'X-Request-Id',
      'Expect',
      'Proxy-Authorization',
      'Expires',
      'Warning',
      'tx',
      'upgradx',
      'trailex',
      'connectiox',
      'keep-alivx',
      'proxy-connectiox',
      'transfer-encodinx',
    ])
      expect(isHopByHopResponse(name), name).toBe(false);
    expect(connectionNamed(undefined)).toBeUndefined();
    expect(connectionNamed(' Keep-Alive ')).toBeUndefined();
    expect(connectionNamed('close')).toBeUndefined();
    expect(connectionNamed(['close', 'X-A , ,x-b'])).toEqual(new Set(['x-a', 'x-b']));
    expect(connectionNamed('keep-alive, close')).toBeUndefined();
    expect(connectionNamed('Keep-Alive, X-Y, CLOSE')).toEqual(new Set(['x-y']));
    // The framing headers are never dropped: a body whose length went unsaid would be smuggled.
    expect(connectionNamed('Content-Length')).toBeUndefined();
    expect(connectionNamed('content-length, Transfer-Encoding, x-z')).toEqual(new Set(['x-z']));
    // Nor is Host: the gateway would get its own address as the target, or none at all.
    expect(connectionNamed('close, Host')).toBeUndefined();
    expect(connectionNamed('HOST, x-z')).toEqual(new Set(['x-z']));
    // Nor the credentials, nor what says which answer is wanted or what the body is: dropped, the
    // gateway answered another request than the one sent (as nobody, a whole body for a range, …).
    expect(
      connectionNamed(
        'Authorization, Cookie, Range, If-Range, If-Match, If-None-Match, If-Modified-Since, ' +
          'If-Unmodified-Since, Content-Type, Content-Encoding, Content-Digest, Repr-Digest',
      ),
    ).toBeUndefined();
    expect(connectionNamed('cookie, x-z, authorization')).toEqual(new Set(['x-z']));
  });

  it("puts the request id in place of the gateway's, whatever the length of the other names; none given keeps the gateway's", () => {
    // Content-Type has the length of x-request-id.
    expect(responseHeaderList(['Content-Type', 'text/plain'], undefined, 'r1')).toEqual([
      'Content-Type',
      'text/plain',
      'x-request-id',
      'r1',
    ]);
    expect(responseHeaderList(['X-Request-ID', 'g1', 'Content-Type', 'text/plain'], undefined, 'r1')).toEqual([
      'Content-Type',
      'text/plain',
      'x-request-id',
      'r1',
    ]);
    expect(responseHeaderList(['Content-Type', 'text/plain'], undefined, undefined)).toEqual([
      'Content-Type',
      'text/plain',
    ]);
    expect(responseHeaderList(['X-Request-ID', 'g1'], undefined, undefined)).toEqual(['X-Request-ID', 'g1']);
  });

  it("never relays a gateway's Strict-Transport-Security (the router's listener sends its own, or none on plain HTTP)", () => {
    // X-Content-Type-Options has another length; a name of its length (25) is kept.
    const raw = ['Strict-Transport-Security', 'max-age=1', 'X-Content-Type-Options', 'nosniff'];
    expect(responseHeaderList([...raw, 'x-padding-to-25-chars-abc', 'v'], undefined, undefined)).toEqual([
      'X-Content-Type-Options',
      'nosniff',
      'x-padding-to-25-chars-abc',
      'v',
    ]);
    expect(responseHeaderList(['strict-transport-security', 'max-age=1'], undefined, 'r1')).toEqual([
      'x-request-id',
      'r1',
    ]);
  });
});

describe('the idle sweep', () => {
  type Socket = { connecting: boolean; bytesRead: number; bytesWritten: number; clientHolds?: boolean };
  function setup(idleMs: number) {
    let clock = 0;
    const fired: string[] = [];
    const sweep = createIdleSweep(
      idleMs,
      (a) => fired.push(a.backend.url),
      () => clock,
    );
    // An exchange as the sweep sees it: the bytes its connection moved, -1 before it has one.
    const attempt = (url: string, socket: Socket | undefined) => ({
      backend: { url },
      upstream: {
        moved: () => (socket && !socket.connecting ? socket.bytesRead + socket.bytesWritten : -1),
        destroy: () => {},
        waitsOnClient: () => socket?.clientHolds === true,
      },
    });
    const at = (ms: number) => {
      clock = ms;
      sweep.sweep();
    };
    return { sweep, fired, attempt, at };
  }

  it('cuts a silent upstream no earlier than the timeout and at most two sweeps after it', () => {
    const { sweep, fired, attempt, at } = setup(1000);
    expect(sweep.tickMs).toBe(250);
    const socket = { connecting: false, bytesRead: 100, bytesWritten: 50 };
    sweep.watch(attempt('silent', socket));
    for (let t = 250; t < 1000; t += 250) at(t);
    at(1249);
    expect(fired).toEqual([]);
    at(1250);
    at(1500);
    expect(fired).toEqual(['silent']);
    expect(sweep.size).toBe(0);
    sweep.close();
  });

  it('counts a byte either way as activity, and a connect in progress or no socket yet as no silence', () => {
    const { sweep, fired, attempt, at } = setup(1000);
    const reading = { connecting: false, bytesRead: 0, bytesWritten: 0 };
    const connecting = { connecting: true, bytesRead: 0, bytesWritten: 0 };
    sweep.watch(attempt('reading', reading));
    sweep.watch(attempt('connecting', connecting));
    sweep.watch(attempt('no socket yet', undefined));
    for (let t = 250; t <= 5000; t += 250) {
      if (t % 500 === 0) reading.bytesRead += 1;
      else reading.bytesWritten += 1;
      at(t);
    }
    expect(fired).toEqual([]);
    // Connected, then silent: the silence counts from the sweep that saw the connect.
    connecting.connecting = false;
    for (const t of [5250, 5500, 5750, 6000, 6249]) {
      reading.bytesRead += 1;
      at(t);
    }
    expect(fired).toEqual([]);
    reading.bytesRead += 1;
    at(6250);
    expect(fired).toEqual(['connecting']);
    sweep.close();
  });

  it("does not count a silence the client holds (its body to come, its answer not taken); the gateway's silence after it counts", () => {
    const { sweep, fired, attempt, at } = setup(1000);
    const held = { connecting: false, bytesRead: 10, bytesWritten: 10, clientHolds: true };
    sweep.watch(attempt('held by its client', held));
    for (let t = 250; t <= 10_000; t += 250) at(t);
    expect(fired).toEqual([]);
    // The client sent its bytes (or took the answer's): the gateway's silence counts from the last
    // sweep that saw the client holding it.
    held.clientHolds = false;
    at(10_250);
    at(10_999);
    expect(fired).toEqual([]);
    at(11_000);
    expect(fired).toEqual(['held by its client']);
    sweep.close();
  });

  it('keeps the right attempts when many settle out of order (twice, or after firing, is harmless)', () => {
    const { sweep, fired, attempt, at } = setup(1000);
    const all = Array.from({ length: 10 }, (_, i) =>
      attempt(`a${i}`, { connecting: false, bytesRead: i, bytesWritten: 0 }),
    );
    for (const a of all) sweep.watch(a);
    sweep.watch(all[3]!);
    expect(sweep.size).toBe(10);
    for (const i of [0, 9, 4, 5, 4]) sweep.unwatch(all[i]!);
    expect(sweep.size).toBe(6);
    at(250);
    at(1250);
    expect(fired.sort()).toEqual(['a1', 'a2', 'a3', 'a6', 'a7', 'a8']);
    expect(sweep.size).toBe(0);
    for (const a of all) sweep.unwatch(a);
    // Watched again after all that: still swept.
    sweep.watch(all[4]!);
    at(2500);
    at(3500);
    expect(fired).toContain('a4');
    sweep.close();
  });

  it('stops watching a settled attempt, and ticks between 50 ms and 1 s', () => {
    const { sweep, fired, attempt, at } = setup(1000);
    const a = attempt('settled', { connecting: false, bytesRead: 1, bytesWritten: 1 });
    sweep.watch(a);
    sweep.unwatch(a);
    at(10_000);
    expect(fired).toEqual([]);
    expect(sweep.size).toBe(0);
    expect(createIdleSweep(100, () => {}).tickMs).toBe(50);
    expect(createIdleSweep(120_000, () => {}).tickMs).toBe(1000);
    sweep.close();
  });
});

describe('failures before the answer', () => {
  it("counts both clients' connect failures, and only those, as a gateway that is down", () => {
    // GETs go through undici, everything else through node:http: a connect timeout from either.
    expect(CONNECT_FAILURES.has(new undiciErrors.ConnectTimeoutError().code)).toBe(true);
    expect(CONNECT_FAILURES.has(new ConnectTimeout('no connection').code)).toBe(true);
    expect(CONNECT_FAILURES.has('ECONNREFUSED')).toBe(true);
    for (const err of [new undiciErrors.SocketError('other side closed'), new undiciErrors.RequestAbortedError()])
      expect(CONNECT_FAILURES.has(err.code)).toBe(false);
    expect(upstreamFailure(new undiciErrors.SocketError('other side closed'), 1000).code).toBe('gateway_unreachable');
    expect(upstreamFailure(new UpstreamTimeout('silent'), 120_000).code).toBe('gateway_timeout');
  });

  it("answers a request the HTTP client refused to send as the client's 400, not a 502", () => {
    for (const err of [
      new undiciErrors.InvalidArgumentError('duplicate host header'),
      new undiciErrors.NotSupportedError('expect header not supported'),
      Object.assign(new TypeError('Invalid character in header content'), { code: 'ERR_INVALID_CHAR' }),
    ])
      expect(upstreamFailure(err, 1000).code).toBe('malformed_request');
  });
});

describe('router configuration', async () => {
  const { loadConfig, ConfigError } = await import('../config/config.ts');
  const shared = {
    ARKVORY_GATEWAY_SLOTS: '2',
    ARKVORY_GATEWAY_SLOT: '1',
    ARKVORY_ROLE: 'reader',
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '1048576',
    ARKVORY_DATABASE_URL: 'postgres://x/y',
  };
  const problems = (env: Record<string, string>): string[] => {
    try {
      loadConfig(env);
      return [];
    } catch (err) {
      if (err instanceof ConfigError) return [...err.problems];
      throw err;
    }
  };

  it('reads the router settings with their defaults', () => {
    const config = loadConfig({
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: 'http://127.0.0.1:1/,http://127.0.0.1:2',
      ARKVORY_TRUSTED_PROXIES: '10.0.0.0/8',
    });
    expect(config.router).toEqual({
      backends: ['http://127.0.0.1:1', 'http://127.0.0.1:2'],
      probeIntervalMs: 2000,
      connectTimeoutMs: 3000,
      idleTimeoutMs: 120_000,
      outlier: { consecutive5xx: 5, baseEjectionMs: 30_000, maxEjectionPercent: 50 },
    });
    expect(config.trustedProxies).toEqual(['10.0.0.0/8']);
    expect(loadConfig({ ...shared, ARKVORY_ADVERTISE_URL: 'http://10.0.0.5:8080/' }).advertiseUrl).toBe(
      'http://10.0.0.5:8080',
    );
  });

  it('trusts no proxy unless ARKVORY_TRUSTED_PROXIES lists it, in every role: loopback is no proxy by itself', () => {
    for (const env of [
      {},
      shared,
      { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: 'http://127.0.0.1:1' },
      { ARKVORY_TRUSTED_PROXIES: 'none' },
    ])
      expect(loadConfig(env).trustedProxies, JSON.stringify(env)).toEqual([]);
    expect(loadConfig({ ARKVORY_TRUSTED_PROXIES: '127.0.0.1, ::1' }).trustedProxies).toEqual(['127.0.0.1', '::1']);
  });

  it('names each wrong router variable', () => {
    expect(problems({ ARKVORY_ROLE: 'router' })).toEqual([
      expect.stringContaining('ARKVORY_ROLE: "router" finds its gateways'),
    ]);
    expect(problems({ ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: 'http://a:1/x' })).toEqual([
      expect.stringMatching(/^ARKVORY_ROUTER_BACKENDS: expected an origin/),
    ]);
    expect(problems({ ARKVORY_ROUTER_BACKENDS: 'http://a:1' })).toEqual([
      expect.stringContaining('only valid with ARKVORY_ROLE=router'),
    ]);
    expect(problems({ ...shared, ARKVORY_ADVERTISE_URL: 'http://u:p@a:1' })).toEqual([
      expect.stringMatching(/^ARKVORY_ADVERTISE_URL: credentials/),
    ]);
    expect(problems({ ARKVORY_ADVERTISE_URL: 'http://a:1' })).toEqual([
      expect.stringContaining('only recorded in the shared profile'),
    ]);
    expect(problems({ ARKVORY_TRUSTED_PROXIES: '10.0.0.0/99' })).toEqual([
      expect.stringMatching(/^ARKVORY_TRUSTED_PROXIES: expected/),
    ]);
    expect(
      problems({
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: 'http://a:1',
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '10',
      }),
    ).toEqual([expect.stringMatching(/^ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: expected an integer from 100/)]);
  });
});
