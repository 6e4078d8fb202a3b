import { describe, expect, it } from 'vitest';
import { hasContentCoding, refuseContentCoding, refuseTransferCoding } from './content-coding.ts';

describe('upload content codings', () => {
  it('takes no header, empty members and identity as the bytes themselves', () => {
    for (const h of [undefined, '', 'identity', 'IDENTITY', ' identity , ', ['identity']])
      expect(hasContentCoding(h)).toBe(false);
  });

  it('sees any other coding, alone, listed after identity or repeated', () => {
    for (const h of ['gzip', 'br', 'x-gzip', 'identity, gzip', ['identity', 'deflate'], 'aes128gcm'])
      expect(hasContentCoding(h)).toBe(true);
  });

  it('refuses with 415 and Accept-Encoding: identity', () => {
    expect(() => refuseContentCoding('gzip')).toThrow(
      expect.objectContaining({ code: 'unsupported_content_encoding', headers: { 'accept-encoding': 'identity' } }),
    );
    expect(() => refuseContentCoding('identity')).not.toThrow();
  });

  it('takes chunked as the only transfer coding; any other is refused with 400', () => {
    for (const h of [undefined, 'chunked', 'Chunked']) expect(() => refuseTransferCoding(h)).not.toThrow();
    for (const h of ['gzip, chunked', 'deflate,chunked', 'x-custom, chunked'])
      expect(() => refuseTransferCoding(h)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });
});
