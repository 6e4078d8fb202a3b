/**
 * A transfer_bytes volume quota across a Redis outage, on a real gateway against a redis-server
 * this test owns: a download that began while Redis was down (its peek failed open) is still counted
 * when it ends with Redis back, so the quota holds for the next request.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { startRedisServer, type RedisServer } from '../../test/harness/index.ts';

const db = useTestDatabase();
const servers: RedisServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.stop();
});

const KiB = 1024;
// Far below one download of the artifact, far above the few hundred bytes of a HEAD.
const QUOTA = `rate_limits:
  transfer_bytes:
    - name: download_bytes_by_principal
      action: limit
      characteristics: [principal]
      limit: 20000
      period_s: 3600
      match:
        direction: download
`;

describe('a transfer_bytes quota across a Redis outage (real gateway, real redis-server)', () => {
  it('counts a download whose peek failed open once Redis is back when it ends', async () => {
    const redis = await startRedisServer();
    servers.push(redis);
    const dir = await makeTempDir('arkvory-rules-');
    const rulesFile = path.join(dir, 'rate_limits.yaml');
    await writeFile(rulesFile, QUOTA);
    await createRepository(db.pool, 'quota');
    const { key } = await createServiceAccount(db.pool, { grants: { quota: 'write' } });
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: redis.url,
        ARKVORY_RATE_LIMITS_FILE: rulesFile,
        // 96 KiB at 16 KiB/s: the download lasts several seconds, time to bring Redis back.
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(16 * KiB),
      },
    });
    const url = `${gw.url}/api/v1/repositories/quota/artifacts/big`;
    const body = randomContent(96 * KiB);
    expect((await request(url, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);

    await redis.stop();
    const download = request(`${url}/content`, { headers: bearer(key) });
    await sleep(200); // the download's peek is made (and fails open) while Redis is down
    servers.push(await startRedisServer({ port: redis.port }));
    const done = await download;
    expect(done.status).toBe(200);
    expect(done.body.length).toBe(body.length);

    // The count lands as the response closes; a HEAD moves a few hundred bytes, far below the quota.
    const statuses: number[] = [];
    for (let i = 0; i < 20 && statuses.at(-1) !== 429; i++) {
      statuses.push((await request(`${url}/content`, { method: 'HEAD', headers: bearer(key) })).status);
      if (statuses.at(-1) !== 429) await sleep(250);
    }
    expect(statuses.at(-1)).toBe(429);
    expect(await gw.stop()).toBe(0);
  });
});
