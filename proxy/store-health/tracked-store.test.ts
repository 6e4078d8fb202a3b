import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import type { ArtifactStore, StageOptions } from '../../storage-adapter/store.ts';
import { ClientBody } from './client-body.ts';
import { StoreHealth, storeHealthOptions } from './store-health.ts';
import { trackStoreHealth } from './tracked-store.ts';

const errno = (code: string, message = code) => Object.assign(new Error(message), { code });

/**
 * A store whose stage reads the body, then fails with `storeError`; a failing body fails it with the
 * body's error, or with `storeError` when `replaces` (an upstream PUT reset under a failed body).
 */
function failingStore(storeError?: Error, replaces = false): ArtifactStore {
  return {
    kind: 'fs',
    location: '/nowhere',
    storageId: 'id',
    writable: true,
    async stage(body: AsyncIterable<Uint8Array>) {
      try {
        for await (const _ of body);
      } catch (err) {
        throw replaces ? storeError : err;
      }
      throw storeError ?? new Error('unreached');
    },
  } as unknown as ArtifactStore;
}

/** A request stream cut by its client: Node's `aborted` error, the request destroyed before its end. */
function cutRequest(): { req: IncomingMessage; body: AsyncIterable<Uint8Array> } {
  const req = { destroyed: true, readableEnded: false } as unknown as IncomingMessage;
  async function* body(): AsyncGenerator<Uint8Array> {
    yield new Uint8Array(8);
    throw errno('ECONNRESET', 'aborted');
  }
  return { req, body: body() };
}

async function* oneChunk(): AsyncGenerator<Uint8Array> {
  yield new Uint8Array(4);
}

function fresh() {
  const health = new StoreHealth(storeHealthOptions(1000), new ManualClock());
  return health;
}

const options: StageOptions = { maxBytes: 1024 };

describe('store health of uploads', () => {
  it('a body the client cut is not the store’s failure, however many; it fails with a client code', async () => {
    const health = fresh();
    const store = trackStoreHealth(failingStore(), health);
    for (let i = 0; i < 4; i++) {
      const { req, body } = cutRequest();
      const err = await store.stage(new ClientBody(req, body), options).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'invalid_request', cause: { code: 'ECONNRESET' } });
    }
    expect(health.snapshot()).toMatchObject({ state: 'ok', failuresInARow: 0, lastError: undefined });
  });

  it('a store that replaces the body’s failure with its own (a reset upstream PUT) is not counted either', async () => {
    const health = fresh();
    const store = trackStoreHealth(failingStore(errno('ECONNRESET'), true), health);
    for (let i = 0; i < 3; i++) {
      const { req, body } = cutRequest();
      await expect(store.stage(new ClientBody(req, body), options)).rejects.toMatchObject({ code: 'ECONNRESET' });
    }
    expect(health.state).toBe('ok');
  });

  it('a stage whose caller gave up (signal aborted) reports nothing', async () => {
    const health = fresh();
    const store = trackStoreHealth(failingStore(errno('ECONNRESET')), health);
    const controller = new AbortController();
    controller.abort();
    for (let i = 0; i < 3; i++) {
      await expect(store.stage(oneChunk(), { ...options, signal: controller.signal })).rejects.toThrow();
    }
    expect(health.state).toBe('ok');
  });

  it('the store failing under a whole body counts: twice in a row makes it unreachable', async () => {
    const health = fresh();
    const store = trackStoreHealth(failingStore(errno('EIO')), health);
    const whole = { destroyed: false, readableEnded: true } as unknown as IncomingMessage;
    for (let i = 0; i < 2; i++) {
      await expect(store.stage(new ClientBody(whole, oneChunk()), options)).rejects.toMatchObject({
        code: 'EIO',
      });
    }
    expect(health.snapshot()).toMatchObject({ state: 'unreachable', lastError: { code: 'upstream_unreachable' } });
  });

  it('a check on the body keeps its own code and is the client’s', async () => {
    const health = fresh();
    const store = trackStoreHealth(failingStore(), health);
    const whole = { destroyed: false, readableEnded: false } as unknown as IncomingMessage;
    async function* overQuota(): AsyncGenerator<Uint8Array> {
      yield new Uint8Array(1);
      // A raw errno (a database the quota check could not reach) is not the store's either.
      throw errno('ECONNREFUSED');
    }
    for (let i = 0; i < 3; i++) {
      await expect(store.stage(new ClientBody(whole, overQuota()), options)).rejects.toMatchObject({
        code: 'ECONNREFUSED',
      });
    }
    expect(health.state).toBe('ok');
  });
});
