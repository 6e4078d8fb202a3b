/**
 * A download already running is cut once its key is revoked, its principal disabled (also when
 * enabled again at once) or its grant removed: a real gateway paces it slowly enough (256 KiB/s
 * per principal for 4 MiB: 16 s) that it is still running when the change is made, and its stream
 * must end, incomplete, within the revocation bound (2 s, docs/auth.md) plus a margin. Before, a
 * download begun before the revocation ran to its end, however long it took.
 */
import http from 'node:http';
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { bearer, createRepository, createServiceAccount, type ServiceAccount } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { http2Request } from '../../test/support/http2-request.ts';
import { createCertificateAuthority, issueServerCertificate } from '../../test/harness/index.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
const repository = 'cut-downloads';
const SIZE = 4 * 1024 * 1024;
let gw: GatewayProcess;

interface Download {
  /** Bytes of the body received so far. */
  received(): number;
  /** How the stream ended: `complete`, `cut` (reset or closed before its end), or undefined while it runs. */
  ended(): 'complete' | 'cut' | undefined;
  status(): number | undefined;
  /** Ends it from the client's side (a download left running would hold the gateway's stop). */
  stop(): void;
}

function startDownload(key: string, link?: string): Download {
  let received = 0;
  let status: number | undefined;
  let ended: 'complete' | 'cut' | undefined;
  const req = http.get(
    link ? `${gw.url}${link}` : `${gw.url}/api/v1/repositories/${repository}/artifacts/big/content`,
    {
      headers: link ? {} : bearer(key),
      agent: false,
    },
  );
  req.on('response', (res) => {
    status = res.statusCode;
    res.on('data', (c: Buffer) => {
      received += c.length;
    });
    res.on('end', () => {
      ended ??= received === SIZE ? 'complete' : 'cut';
    });
    res.on('error', () => {
      ended ??= 'cut';
    });
    res.on('close', () => {
      ended ??= 'cut';
    });
  });
  req.on('error', () => {
    ended ??= 'cut';
  });
  return { received: () => received, ended: () => ended, status: () => status, stop: () => req.destroy() };
}

/** Starts a download of `account`, makes `change` once bytes flow, and expects the stream cut within 3.5 s. */
async function expectCut(account: ServiceAccount, change: () => Promise<unknown>, link?: string): Promise<void> {
  const download = startDownload(account.key, link);
  try {
    await waitUntil(() => download.received() > 0, { what: 'the download to be sending its body', timeoutMs: 3000 });
    expect(download.status()).toBe(200);
    await change();
    await waitUntil(() => download.ended() !== undefined, {
      what: 'the running download to be cut',
      timeoutMs: 3500,
    });
    expect(download.ended()).toBe('cut');
    expect(download.received()).toBeLessThan(SIZE);
  } finally {
    download.stop();
  }
}

describe('a running download is cut when its credential is revoked (real gateway, PostgreSQL)', () => {
  beforeAll(async () => {
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(256 * 1024),
      },
    });
    const put = await fetch(`${gw.url}/api/v1/repositories/${repository}/artifacts/big`, {
      method: 'PUT',
      headers: { ...bearer(writer.key), 'content-type': 'application/octet-stream' },
      body: Buffer.alloc(SIZE, 7),
    });
    expect(put.status).toBe(201);
  }, 30_000);

  afterAll(async () => {
    expect(await gw?.stop()).toBe(0);
  });

  it('its key revoked', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    await expectCut(reader, () => new AdminStore(db.pool).revokeKey(reader.keyId));
    // Said once, at info, with the refusal's code; nothing of it logged as the gateway's own failure.
    const cutLine = () =>
      gw
        .logLines()
        .find((l) => l.msg === 'download cut: its credential no longer admits it' && l.principal === reader.name);
    await waitUntil(() => cutLine() !== undefined, { what: 'the cut to be logged', timeoutMs: 2000 });
    const cut = cutLine()!;
    expect(cut).toMatchObject({ level: 'info', code: 'unauthorized' });
    const request = gw.logLines().filter((l) => l.reqId === cut.reqId);
    expect(request.filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
    // Not the client's doing: no "client went away" line blames it.
    expect(request.filter((l) => l.code === 'client_aborted')).toEqual([]);
  });

  it('its principal disabled', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    await expectCut(reader, () => new AdminStore(db.pool).setPrincipalDisabled(reader.principalId, true));
  });

  it('its principal disabled and enabled again in one transaction (no moment where it reads disabled)', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    await expectCut(reader, async () => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('UPDATE arkvory_principals SET disabled = true WHERE id = $1', [reader.principalId]);
        await client.query('UPDATE arkvory_principals SET disabled = false WHERE id = $1', [reader.principalId]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    });
    // Enabled, its key works again for a new request.
    const head = await fetch(`${gw.url}/api/v1/repositories/${repository}/artifacts/big`, {
      headers: bearer(reader.key),
    });
    expect(head.status).toBe(200);
  });

  it('its grant removed', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    await expectCut(reader, () => new AdminStore(db.pool).removeGrant(reader.principalId, repository));
  });

  it('by a pre-signed link, its grant removed and given back in one transaction (the link stays void)', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    const made = await fetch(`${gw.url}/api/v1/repositories/${repository}/artifacts/big/presign`, {
      method: 'POST',
      headers: { ...bearer(reader.key), 'content-type': 'application/json' },
      body: '{}',
    });
    expect(made.status).toBe(201);
    const { path } = (await made.json()) as { path: string };
    await expectCut(
      reader,
      async () => {
        const client = await db.pool.connect();
        try {
          await client.query('BEGIN');
          await client.query('DELETE FROM arkvory_grants WHERE principal_id = $1 AND repository = $2', [
            reader.principalId,
            repository,
          ]);
          await client.query(
            `INSERT INTO arkvory_grants (principal_id, repository, permission) VALUES ($1, $2, 'read')`,
            [reader.principalId, repository],
          );
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      },
      path,
    );
  });

  it('a key of another principal revoked leaves it running', async () => {
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    const other = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    const download = startDownload(reader.key);
    await waitUntil(() => download.received() > 0, { what: 'the download to be sending its body', timeoutMs: 3000 });
    await new AdminStore(db.pool).revokeKey(other.keyId);
    const before = download.received();
    try {
      await new Promise((r) => setTimeout(r, 2500));
      expect(download.ended()).toBeUndefined();
      expect(download.received()).toBeGreaterThan(before);
    } finally {
      download.stop();
    }
  });
});

describe('over HTTP/2 (TLS gateway)', () => {
  it("the revoked key's download stream is reset (RST_STREAM); its connection still serves", async () => {
    const dir = await makeTempDir('arkvory-h2-cut-');
    const ca = await createCertificateAuthority(dir);
    const server = await issueServerCertificate(ca, dir);
    const repo = 'cut-downloads-h2';
    await createRepository(db.pool, repo);
    const writer = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
    const reader = await createServiceAccount(db.pool, { grants: { [repo]: 'read' } });
    const h2 = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_TLS_CERT_FILE: server.certFile,
        ARKVORY_TLS_KEY_FILE: server.keyFile,
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(256 * 1024),
      },
      waitFor: 'none',
    });
    const origin = `https://127.0.0.1:${h2.port}`;
    await waitUntil(
      async () =>
        (await http2Request(origin, ca.certPem, '/health/status', { timeoutMs: 2000 }).catch(() => undefined))
          ?.status === 200,
      { what: 'the TLS gateway to be serving', timeoutMs: 30_000 },
    );
    const target = `/api/v1/repositories/${repo}/artifacts/big`;
    const session = http2.connect(origin, { ca: ca.certPem });
    try {
      const put = await http2Request(origin, ca.certPem, target, {
        method: 'PUT',
        headers: bearer(writer.key),
        body: Buffer.alloc(SIZE, 9),
        session,
      });
      expect(put.status).toBe(201);
      let received = 0;
      let rstCode: number | undefined;
      let ended = false;
      const stream = session.request({ ':method': 'GET', ':path': `${target}/content`, ...bearer(reader.key) });
      stream.on('data', (c: Buffer) => {
        received += c.length;
      });
      stream.on('error', () => {});
      stream.on('end', () => {
        ended = true;
      });
      stream.on('close', () => {
        rstCode = stream.rstCode;
      });
      await waitUntil(() => received > 0, { what: 'the download to be sending its body', timeoutMs: 3000 });
      await new AdminStore(db.pool).revokeKey(reader.keyId);
      await waitUntil(() => rstCode !== undefined, { what: 'the HTTP/2 stream to be reset', timeoutMs: 3500 });
      expect(rstCode).not.toBe(http2.constants.NGHTTP2_NO_ERROR);
      expect(ended && received === SIZE).toBe(false);
      expect(received).toBeLessThan(SIZE);
      // Only that stream: the connection goes on serving.
      const health = await http2Request(origin, ca.certPem, '/health/live', { session });
      expect(health.status).toBe(200);
    } finally {
      session.destroy();
      expect(await h2.stop()).toBe(0);
    }
  });
});
