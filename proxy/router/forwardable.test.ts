import { describe, expect, it } from 'vitest';
import { findClientFault, upstreamHeadBytes } from './forwardable.ts';

const ok = ['Host', 'gw.example:8080', 'Accept', '*/*'];

describe('findClientFault', () => {
  it('passes ordinary requests', () => {
    expect(findClientFault('GET', '/api/v1/repositories', ok)).toBeUndefined();
    expect(findClientFault('PUT', '/a?b=c%20d', [...ok, 'Content-Length', '12'])).toBeUndefined();
    expect(findClientFault('GET', 'http://gw.example/a', ok)).toBeUndefined();
    expect(findClientFault('OPTIONS', '*', ok)).toBeUndefined();
    expect(findClientFault('GET', '/', ['Host', '[::1]:80', 'X-Latin', 'caf\u00e9', 'X-Tab', 'a\tb'])).toBeUndefined();
    expect(findClientFault('GET', '/', ['Host', ''])).toBeUndefined();
    expect(findClientFault('GET', '/', [])).toBeUndefined();
  });

  it.each([
    ['two Host headers', 'GET', '/', ['Host', 'a', 'Accept', '*/*', 'host', 'b'], 'duplicate_host'],
    ['a Host that is no host[:port]', 'GET', '/', ['Host', 'a b/c'], 'invalid_host'],
    [
      'two Content-Length headers',
      'PUT',
      '/',
      ['Host', 'a', 'Content-Length', '1', 'content-length', '1'],
      'duplicate_content_length',
    ],
    ['a signed Content-Length', 'PUT', '/', ['Host', 'a', 'Content-Length', '+1'], 'invalid_content_length'],
    ['an empty Content-Length', 'PUT', '/', ['Host', 'a', 'Content-Length', ''], 'invalid_content_length'],
    ['a header name with a space', 'GET', '/', ['Host', 'a', 'X Bad', '1'], 'invalid_header_name'],
    ['a NUL in a value', 'GET', '/', ['Host', 'a', 'X-A', 'a\u0000b'], 'invalid_header_value'],
    ['a DEL in a value', 'GET', '/', ['Host', 'a', 'X-A', 'a\u007fb'], 'invalid_header_value'],
    ['a character above 0xff', 'GET', '/', ['Host', 'a', 'X-A', 'a\u0100'], 'invalid_header_value'],
    ['a target that is not a path', 'GET', 'api/v1', ok, 'invalid_target'],
    ['a space in the target', 'GET', '/a b', ok, 'invalid_target'],
    ['* on GET', 'GET', '*', ok, 'invalid_target'],
    ['a method that is not a token', 'G(T', '/', ok, 'invalid_method'],
    [
      'two Authorization headers',
      'GET',
      '/',
      ['Host', 'a', 'Authorization', 'Bearer a', 'AUTHORIZATION', 'Bearer b'],
      'duplicate_authorization',
    ],
  ])('%s → %s', (_name, method, target, headers, kind) => {
    const fault = findClientFault(method, target, headers);
    expect(fault?.kind).toBe(kind);
    expect(fault?.message.length).toBeGreaterThan(10);
  });

  it('answers a second Authorization with the code the gateway gives it; one alone passes', () => {
    expect(findClientFault('GET', '/', [...ok, 'Authorization', 'Bearer a'])).toBeUndefined();
    expect(findClientFault('GET', '/', [...ok, 'authorization', 'a', 'Authorization', 'b'])?.code).toBe(
      'duplicate_authorization',
    );
    expect(findClientFault('GET', '/', ['Host', 'a', 'Host', 'b'])?.code).toBeUndefined();
  });

  it('never echoes a header value in its message', () => {
    const fault = findClientFault('GET', '/', ['Host', 'a', 'X-Secret', 'token\u0001value']);
    expect(fault?.message).not.toContain('token');
  });
});

describe('upstreamHeadBytes', () => {
  it('counts the target, the names and the values, as node:http does against its maxHeaderSize', () => {
    expect(upstreamHeadBytes('/abc', [])).toBe(4);
    expect(upstreamHeadBytes('/abc', ['Host', 'h', 'X-A', 'caf\u00e9'])).toBe(4 + 5 + 7);
  });
});
