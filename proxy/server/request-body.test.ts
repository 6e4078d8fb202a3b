import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { isPlainJsonType, readJsonBody } from './request-body.ts';

function body(text: string, type = 'application/json'): IncomingMessage {
  return Object.assign(Readable.from([Buffer.from(text)]), {
    headers: { 'content-type': type },
  }) as unknown as IncomingMessage;
}

describe('readJsonBody', () => {
  it('takes application/json with its parameters, and refuses JSON-based and look-alike types and other charsets', async () => {
    for (const type of [
      'application/json',
      'Application/JSON',
      'application/json; charset=utf-8',
      'application/json;charset="UTF-8"',
    ])
      expect(await readJsonBody(body('{"a":1}', type)), type).toEqual({ a: 1 });
    for (const type of [
      'application/json-patch+json',
      'application/merge-patch+json',
      'application/jsonx',
      'application/json-seq',
      'application/json; charset=latin1',
      'text/json',
    ])
      await expect(readJsonBody(body('{"a":1}', type)), type).rejects.toMatchObject({
        code: 'invalid_request',
        message: 'Send JSON with Content-Type: application/json.',
      });
    expect(isPlainJsonType('application/json ; charset=utf8')).toBe(true);
  });

  it('reads a JSON object', async () => {
    expect(await readJsonBody(body('{"name":"a\\\\u0000b"}'))).toEqual({ name: 'a\\u0000b' });
  });

  it('refuses U+0000 in a string or a key as invalid_request (PostgreSQL text cannot hold it)', async () => {
    await expect(readJsonBody(body('{"description":"x\\u0000"}'))).rejects.toMatchObject({
      code: 'invalid_request',
      message: 'JSON strings may not contain U+0000.',
    });
    await expect(readJsonBody(body('{"a":{"\\u0000":1}}'))).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(readJsonBody(body('{"a":["ok","\\u0000"]}'))).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('refuses JSON nested deeper than 64 levels as invalid_request, saying so, at any depth the size bound lets through', async () => {
    for (const depth of [65, 2_000, 30_000]) {
      const deep = `{"ttl_s":${'['.repeat(depth)}${']'.repeat(depth)}}`;
      await expect(readJsonBody(body(deep))).rejects.toMatchObject({
        code: 'invalid_request',
        message: 'The body nests arrays and objects deeper than 64 levels; no route takes such a body.',
      });
    }
    const within = `{"a":${'['.repeat(63)}${']'.repeat(63)}}`;
    expect(Object.keys(await readJsonBody(body(within)))).toEqual(['a']);
  });

  it('refuses a body past the bound with 413, by its Content-Length before reading, and never destroys the request (its 413 must reach the client)', async () => {
    const declared = Object.assign(Readable.from([Buffer.alloc(10)]), {
      headers: { 'content-type': 'application/json', 'content-length': '11' },
    }) as unknown as IncomingMessage;
    await expect(readJsonBody(declared, 10)).rejects.toMatchObject({ code: 'payload_too_large' });
    expect(declared.readableDidRead).toBe(false);
    const streamed = Object.assign(Readable.from([Buffer.alloc(6), Buffer.alloc(6), Buffer.alloc(6)]), {
      headers: { 'content-type': 'application/json' },
    }) as unknown as IncomingMessage;
    await expect(readJsonBody(streamed, 10)).rejects.toMatchObject({ code: 'payload_too_large' });
    expect(streamed.destroyed).toBe(false);
  });
});
