import { describe, expect, it } from 'vitest';
import { STORAGE_ERRORS } from '../errors.ts';
import { s3ErrorOf, storageErrorOfS3 } from './s3-client.ts';

const errorXml = (code: string) =>
  `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>m</Message></Error>`;

describe('storageErrorOfS3', () => {
  it("maps EntityTooLarge (the store's size limit on one object or part) to 413 object_too_large, not storage_full", () => {
    const err = storageErrorOfS3(400, s3ErrorOf(errorXml('EntityTooLarge')), 'PUT k', 'b');
    expect(err.code).toBe('object_too_large');
    expect(STORAGE_ERRORS.entries.object_too_large.status).toBe(413);
    expect(err.message).toContain('400 EntityTooLarge');
  });

  it('maps a full store (XMinioStorageFull, QuotaExceeded, a 507) to 507 storage_full', () => {
    expect(storageErrorOfS3(507, s3ErrorOf(errorXml('XMinioStorageFull')), 'PUT k', 'b').code).toBe('storage_full');
    expect(storageErrorOfS3(403, s3ErrorOf(errorXml('QuotaExceeded')), 'PUT k', 'b').code).toBe('storage_full');
    expect(storageErrorOfS3(507, undefined, 'PUT k', 'b').code).toBe('storage_full');
  });
});
