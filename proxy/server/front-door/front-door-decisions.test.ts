import { describe, expect, it } from 'vitest';
import { WWW_AUTHENTICATE } from '../../../policy/auth/authenticator.ts';
import { HEAD_TIMEOUT, MALFORMED_REQUEST } from '../errors.ts';
import { toHttpError } from '../http-errors.ts';
import { clientErrorAnswer, hasMalformedAuthorization } from './client-errors.ts';
import { DRAINING, OVERLOADED } from '../errors.ts';
import { judgeConnection, overloadRefusal } from './connection-bound.ts';
import { OVERFLOW_ANSWERED } from './descriptor-budget.ts';
import { drainRefusal } from './drain.ts';
import { idleAction } from './timeouts.ts';

describe('judgeConnection', () => {
  it.each([
    [10, 10, 'serve'],
    [11, 10, 'refuse'],
    [10 + OVERFLOW_ANSWERED, 10, 'refuse'],
    [11 + OVERFLOW_ANSWERED, 10, 'cut'],
  ] as const)('%i live of %i → %s', (live, max, verdict) => {
    expect(judgeConnection(live, max)).toBe(verdict);
  });
});

describe('refusals over the bound and while draining', () => {
  it('over the bound, liveness and status are still answered, readiness and the rest get the 503', () => {
    expect(overloadRefusal('GET', '/health/live')).toBeUndefined();
    expect(overloadRefusal('HEAD', '/health/status')).toBeUndefined();
    expect(overloadRefusal('GET', '/health/ready')).toBe(OVERLOADED);
    expect(overloadRefusal('POST', '/health/live')).toBe(OVERLOADED);
    expect(overloadRefusal('GET', '/api/v1/repositories')).toBe(OVERLOADED);
  });

  it('while draining, readiness is answered too (it says draining), the rest gets the 503', () => {
    expect(drainRefusal('GET', '/health/ready')).toBeUndefined();
    expect(drainRefusal('HEAD', '/health/live')).toBeUndefined();
    expect(drainRefusal('PUT', '/health/ready')).toBe(DRAINING);
    expect(drainRefusal('GET', '/api/v1/repositories')).toBe(DRAINING);
  });
});

describe('idleAction', () => {
  const base = { inRequest: true, complete: false, announcesBody: true, headersSent: false };
  it.each([
    ['between requests', { ...base, inRequest: false }, { kind: 'close' }],
    ['body stalled, nothing answered', base, { kind: 'answer408' }],
    [
      'body stalled after an answer',
      { ...base, headersSent: true },
      { kind: 'cut', counter: 'body', phase: 'request_body' },
    ],
    [
      'response not taken',
      { ...base, complete: true, headersSent: true },
      { kind: 'cut', counter: 'send', phase: 'response' },
    ],
    [
      'head read, no body announced',
      { ...base, announcesBody: false },
      { kind: 'cut', counter: 'send', phase: 'request_body' },
    ],
    ['an upload waiting for its bandwidth turn', { ...base, pacing: true }, { kind: 'wait' }],
    [
      'a download waiting for its bandwidth turn',
      { ...base, complete: true, headersSent: true, pacing: true },
      { kind: 'wait' },
    ],
    ['between requests, a meter left waiting', { ...base, inRequest: false, pacing: true }, { kind: 'close' }],
  ] as const)('%s', (_, connection, action) => {
    expect(idleAction(connection)).toEqual(action);
  });
});

describe('clientErrorAnswer', () => {
  it('answers the head timeout with 408 request_timeout', () => {
    expect(clientErrorAnswer({ code: 'ERR_HTTP_REQUEST_TIMEOUT' })).toBe(HEAD_TIMEOUT);
  });

  it('answers a malformed head with 400 invalid_request', () => {
    const raw = Buffer.from('BAD / HTTP/1.1\r\n');
    expect(clientErrorAnswer({ code: 'HPE_INVALID_METHOD', rawPacket: raw })).toBe(MALFORMED_REQUEST);
    expect(clientErrorAnswer({ code: 'HPE_HEADER_OVERFLOW' })).toBe(MALFORMED_REQUEST);
  });

  it('answers control bytes inside Authorization like any bad key: 401 unauthorized with its challenge', () => {
    const raw = Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n', 'latin1');
    const answer = toHttpError(clientErrorAnswer({ code: 'HPE_INVALID_HEADER_TOKEN', rawPacket: raw }));
    expect(answer.status).toBe(401);
    expect(answer.code).toBe('unauthorized');
    expect(answer.headers['www-authenticate']).toEqual(WWW_AUTHENTICATE);
  });

  it('finds bad bytes only in the Authorization line', () => {
    expect(hasMalformedAuthorization(Buffer.from('GET / HTTP/1.1\r\nAuthorization: Bearer ok\r\nX: a\x01\r\n'))).toBe(
      false,
    );
    expect(hasMalformedAuthorization(Buffer.from('GET / HTTP/1.1\r\nauthorization: \x7f\r\n'))).toBe(true);
  });
});
