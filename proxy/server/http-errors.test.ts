import { describe, expect, it } from 'vitest';
import { CLIENT_ERRORS } from '../../client/index.ts';
import { mergeCatalogues } from '../../lib/coded-error.ts';
import { PolicyError } from '../../policy/errors.ts';
import { RateLimitError } from '../../policy/rate-limit/errors.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import { GatewayError } from './errors.ts';
import { ERROR_CATALOGUE, LAYER_CATALOGUES, toHttpError } from './http-errors.ts';

describe('the merged error catalogue', () => {
  it('holds every code of every layer once', () => {
    const declared = LAYER_CATALOGUES.flatMap((c) => Object.keys(c.entries));
    expect(new Set(declared).size).toBe(declared.length);
    expect(Object.keys(ERROR_CATALOGUE.entries).sort()).toEqual([...declared].sort());
  });

  it('gives every code a status (or none, for codes no response carries), a message and advice', () => {
    for (const [code, entry] of Object.entries(ERROR_CATALOGUE.entries)) {
      expect(code).toMatch(/^[a-z][a-z_]*$/);
      if (entry.status !== null) expect(entry.status, code).toSatisfy((s: number) => s >= 400 && s <= 599);
      expect(entry.message.trim().length, code).toBeGreaterThan(0);
      expect(entry.advice.trim().length, code).toBeGreaterThan(0);
    }
  });

  it('fails when a layer declares a code another layer already declares, naming both', () => {
    const [common, policy, ...rest] = LAYER_CATALOGUES;
    const stray = { layer: 'stray-layer', entries: { not_found: common.entries.not_found } };
    expect(() => mergeCatalogues('http', common, policy, stray, ...rest)).toThrow(
      /"not_found" is declared by both lib\/common-errors\.ts and stray-layer/,
    );
  });

  it('shares no code with the client’s own codes (ArkvoryClientError carries either)', () => {
    for (const code of Object.keys(CLIENT_ERRORS)) expect(ERROR_CATALOGUE.entries).not.toHaveProperty(code);
  });

  it('keeps the router’s codes apart from the artifact store’s', () => {
    expect(ERROR_CATALOGUE.entries.gateway_timeout.message).not.toMatch(/store/);
    expect(ERROR_CATALOGUE.entries.gateway_unreachable.message).not.toMatch(/store/);
    expect(ERROR_CATALOGUE.entries.upstream_timeout.message).toMatch(/artifact store/);
    expect(ERROR_CATALOGUE.layerOf.upstream_timeout).toBe('storage-adapter/errors.ts');
  });
});

describe('toHttpError', () => {
  it('answers a coded error with its catalogue status, its message, headers and details', () => {
    expect(
      toHttpError(
        new PolicyError('rate_limited', undefined, { headers: { 'retry-after': '3' }, details: { limiter: 'x' } }),
      ),
    ).toEqual({
      status: 429,
      code: 'rate_limited',
      message: 'Too many requests; retry later.',
      headers: { 'retry-after': '3' },
      details: { limiter: 'x' },
    });
    expect(toHttpError(new StorageError('upstream_timeout')).status).toBe(504);
    expect(toHttpError(new GatewayError('gateway_timeout')).status).toBe(504);
  });

  it("answers a store's 5xx with the catalogue's words, never the store's own (addresses, bucket, its error text)", () => {
    const quoted =
      'The S3 server answered GET arkvory/blobs/ab with 416 InvalidRange: connect ECONNREFUSED 10.0.0.30:8333';
    for (const code of ['upstream_unreachable', 'upstream_timeout', 'storage_full', 'slice_digest_mismatch'] as const)
      expect(toHttpError(new StorageError(code, quoted)).message).toBe(ERROR_CATALOGUE.entries[code].message);
    // A store's 4xx is about the request, and says so in its own words.
    expect(toHttpError(new StorageError('not_found', 'No such artifact.')).message).toBe('No such artifact.');
    // Other layers' 5xx keep theirs (written for the client: a drain, a lost lease).
    expect(toHttpError(new GatewayError('unavailable', 'The gateway is shutting down.')).message).toBe(
      'The gateway is shutting down.',
    );
  });

  it('never lets details replace the code or the message', () => {
    const mapped = toHttpError(new GatewayError('invalid_request', 'Bad.', { details: { code: 'x', message: 'y' } }));
    expect(mapped).toMatchObject({ code: 'invalid_request', message: 'Bad.', details: {} });
  });

  it('answers 500 internal with the generic message for a code no response carries, or no code', () => {
    const internal = { status: 500, code: 'internal', message: 'Internal error.', headers: {}, details: {} };
    expect(toHttpError(new RateLimitError('store_unavailable'))).toEqual(internal);
    expect(toHttpError(Object.assign(new Error('boom'), { code: 'ECONNRESET' }))).toEqual(internal);
    expect(toHttpError('not an error')).toEqual(internal);
  });
});
