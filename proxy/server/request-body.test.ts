import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { readJsonBody } from './request-body.ts';

function body(text: string): IncomingMessage {
  return Object.assign(Readable.from([Buffer.from(text)]), {
    headers: { 'content-type': 'application/json' },
  }) as unknown as IncomingMessage;
}

describe('readJsonBody', () => {
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
