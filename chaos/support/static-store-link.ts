/**
 * A gateway whose static-HTTP store (a real nginx) is reached through a toxiproxy link, with one
 * artifact of repository `chaos` uploaded through it: the setup of the store-link faults.
 */
import { expect } from 'vitest';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { startStaticStore, type StaticStore } from '../../test/support/static-store.ts';
import type { ChaosBase } from './chaos-database.ts';
import { call } from './gateways.ts';
import type { ProxiedUpstream } from './toxiproxy.ts';

export interface StoreLink {
  readonly store: StaticStore;
  readonly link: ProxiedUpstream;
  readonly gateway: GatewayProcess;
  stop(): Promise<void>;
}

/** Starts nginx, the link and the gateway (`env` added to its own), and uploads `file` as `chaos/<name>`. */
export async function gatewayBehindStoreLink(
  chaos: ChaosBase,
  env: Record<string, string>,
  upload: { name: string; file: Buffer },
): Promise<StoreLink> {
  const store = await startStaticStore();
  const link = await chaos.toxiproxy.proxyTo(`127.0.0.1:${store.port}`);
  const gateway = await startGateway({
    env: { ARKVORY_DATABASE_URL: chaos.db.url, ARKVORY_STORAGE_URL: link.through(store.url), ...env },
    timeoutMs: 60_000,
  });
  const put = await call(`${gateway.url}/api/v1/repositories/chaos/artifacts/${upload.name}`, {
    method: 'PUT',
    key: chaos.key,
    headers: { 'content-type': 'application/octet-stream' },
    body: upload.file,
  });
  expect(put.status).toBe(201);
  return {
    store,
    link,
    gateway,
    async stop() {
      await gateway.stop();
      await store.stop();
    },
  };
}
