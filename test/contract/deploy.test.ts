/**
 * The files under deploy/ against the code: every ARKVORY_* name exists in the config table, each
 * role's env example (plus what its unit sets) passes the real config validation, the units carry
 * the hardening docs/deploy.md promises, listen where they may and take their secrets from
 * credentials, and pass `systemd-analyze verify`; the Kubernetes manifest parses, shares the volume,
 * probes the health routes and runs every container unprivileged; the container examples mount
 * every file their environment names.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadConfig, VARIABLES } from '../../proxy/config/config.ts';
import { isPlaceholderSecret } from '../../proxy/config/placeholder-secrets.ts';
import { SECRET_FILE_VARIABLES } from '../../proxy/config/secret-files.ts';
import {
  DEPLOY,
  documentedLogins,
  envExample,
  environmentLine,
  parseEnvFile,
  loadCredentials,
  parseUnit,
  service,
  type Unit,
  unit,
  unitEnvironment,
} from '../support/deploy-files.ts';
import { ROOT } from '../support/gateway.ts';

const KNOWN = new Set(VARIABLES.map((v) => v.name));
const DATA_DIR = '/var/lib/arkvory';
const run = promisify(execFile);
/** deploy/container/build.sh's own settings (docs/deploy.md "Container image"), not the gateway's. */
const BUILD_SCRIPT = 'deploy/container/build.sh';
const BUILD_VARIABLES = ['ARKVORY_TOOLS_DIR', 'ARKVORY_IMAGE_NAME', 'ARKVORY_IMAGE_SOURCE', 'ARKVORY_IMAGE_CACHE_DIR'];

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await filesUnder(full)));
    else out.push(full);
  }
  return out;
}

/** Each serving unit, its role, whether it writes the storage root, and the group role of its login (docs/deploy.md). */
const ROLES = [
  { unit: 'arkvory-writer.service', role: 'api', writes: true, group: 'arkvory_writer' },
  { unit: 'arkvory-reader@.service', role: 'reader', writes: false, group: 'arkvory_reader' },
  { unit: 'arkvory-worker.service', role: 'worker', writes: true, group: 'arkvory_worker' },
  { unit: 'arkvory-router.service', role: 'router', writes: false, group: 'arkvory_reader' },
  { unit: 'arkvory-rules-service.service', role: 'rules-service', writes: false, group: 'arkvory_rules' },
] as const;
const UNITS = [...ROLES.map((r) => r.unit), 'arkvory-backup.service'];

/** Secrets a file under deploy/env must never hold (they come from …_FILE credentials). */
const SECRET_VALUES = new Set([
  ...VARIABLES.filter((v) => v.secret && v.kind.type !== 'url' && v.kind.type !== 'url-list').map((v) => v.name),
  ...SECRET_FILE_VARIABLES.map((v) => v.fills).filter((name) => !name.endsWith('_URL')),
]);
/** Secret-bearing URLs: set, but without a password in their user info. */
const SECRET_URLS = new Set(
  VARIABLES.filter((v) => v.secret && (v.kind.type === 'url' || v.kind.type === 'url-list')).map((v) => v.name),
);

/** The secrets written into an env text: a secret variable set, or a URL carrying a password. */
function inlineSecrets(env: Record<string, string>): string[] {
  const found: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (SECRET_VALUES.has(name) && value !== '') found.push(name);
    if (SECRET_URLS.has(name))
      for (const entry of value.split(','))
        if (URL.canParse(entry) && new URL(entry).password !== '') found.push(`${name} (password in the URL)`);
  }
  return found;
}

/** Whether a unit can bind a port below 1024: as root, or with CAP_NET_BIND_SERVICE bounded and ambient. */
function mayBindPrivileged(u: Unit): boolean {
  const caps = (key: string) => service(u, key).join(' ').split(/\s+/);
  const root = (service(u, 'User')[0] ?? 'root') === 'root';
  const bounded =
    service(u, 'CapabilityBoundingSet').length === 0 || caps('CapabilityBoundingSet').includes('CAP_NET_BIND_SERVICE');
  return bounded && (root || caps('AmbientCapabilities').includes('CAP_NET_BIND_SERVICE'));
}

/**
 * Where a unit's process may write under ProtectSystem=strict: ReadWritePaths=, the directories
 * systemd makes for it (StateDirectory= under /var/lib, CacheDirectory= under /var/cache,
 * LogsDirectory= under /var/log, RuntimeDirectory= under /run) and, with PrivateTmp=, /tmp; a
 * deeper ReadOnlyPaths= entry wins (systemd mounts the more specific path last).
 */
function unitSandbox(u: Unit, slot: string): { writable: string[]; writes: (file: string) => boolean } {
  const paths = (key: string, base = '') =>
    service(u, key)
      .flatMap((line) => line.replaceAll('%i', slot).split(/\s+/))
      .filter((p) => p !== '')
      .map((p) => path.posix.join(base, p.replace(/^[-+]+/, '')));
  const writable = [
    ...paths('ReadWritePaths'),
    ...paths('StateDirectory', '/var/lib'),
    ...paths('CacheDirectory', '/var/cache'),
    ...paths('LogsDirectory', '/var/log'),
    ...paths('RuntimeDirectory', '/run'),
    ...(service(u, 'PrivateTmp')[0] === 'yes' ? ['/tmp'] : []),
  ];
  const readOnly = [...paths('ReadOnlyPaths'), ...paths('InaccessiblePaths')];
  const deepest = (list: string[], file: string) =>
    Math.max(-1, ...list.filter((dir) => file === dir || file.startsWith(`${dir}/`)).map((dir) => dir.length));
  const strict = service(u, 'ProtectSystem')[0] === 'strict';
  return {
    writable,
    writes: (file) => {
      const w = deepest(writable, file);
      return (w >= 0 || !strict) && w > deepest(readOnly, file);
    },
  };
}

/** What an operator writes over the S3 credentials example's placeholders (the gateway refuses those). */
const S3_KEYS = { AWS_ACCESS_KEY_ID: 'arkvory-gateways-key', AWS_SECRET_ACCESS_KEY: 'a-secret-made-for-the-gateways' };

/** The stores a gateway's env file may gain lines for (docs/deploy.md, docs/storage-and-content.md). */
const STORES = [
  { name: 'directory store', files: [] as string[], set: {}, remote: false },
  { name: 'static-HTTP store', files: ['static-store/static-store.env'], set: {}, remote: true },
  {
    name: 'S3 store',
    files: ['s3-store/s3-store.env', 's3-store/s3-credentials.env.example'],
    set: S3_KEYS,
    remote: true,
  },
] as const;

/** A unit's environment with a store's lines appended to its own env file (the first it names). */
async function storeEnvironment(
  u: Unit,
  slot: string,
  store: (typeof STORES)[number],
): Promise<Record<string, string>> {
  const added: Record<string, string> = {};
  for (const file of store.files) Object.assign(added, parseEnvFile(await readFile(path.join(DEPLOY, file), 'utf8')));
  Object.assign(added, store.set);
  const own = service(u, 'EnvironmentFile')[0];
  // Every slot's own env file is shaped like the example of slot 1 (reader-1.env).
  return unitEnvironment(u, slot, '%d', { added: (installed) => (installed === own ? added : {}), exampleSlot: '1' });
}

/** The examples' secret files (LoadCredential=, Secret volumes) exist only where they are deployed. */
const deploySecret = (file: string) => `secret-of-${path.basename(file)}`;

describe('deploy/ names and env examples', () => {
  it('every ARKVORY_* name used anywhere under deploy/ exists in the config table', async () => {
    const files = await filesUnder(DEPLOY);
    const used = new Map<string, string>();
    for (const file of files) {
      for (const m of (await readFile(file, 'utf8')).matchAll(/\bARKVORY_[A-Z0-9_]+/g))
        used.set(m[0], path.relative(ROOT, file));
    }
    expect(used.size).toBeGreaterThan(20);
    const unknown = [...used]
      .filter(([name, file]) => !KNOWN.has(name) && !(file === BUILD_SCRIPT && BUILD_VARIABLES.includes(name)))
      .map(([name, file]) => `${name} (${file})`);
    expect(unknown).toEqual([]);
  });

  it('the image build script reads only its own documented variables besides the config table', async () => {
    const docs = await readFile(path.join(ROOT, 'docs/deploy.md'), 'utf8');
    for (const name of BUILD_VARIABLES) expect(docs, name).toContain(`\`${name}\``);
  });

  it.each(ROLES)(
    '$unit: its env example plus the unit environment is a valid configuration for role $role',
    async ({ unit: name, role }) => {
      const env = await unitEnvironment(await unit(name), '1');
      const config = loadConfig(env, '/', deploySecret);
      expect(config.role).toBe(role);
      if (role === 'api' || role === 'reader') {
        // Every variable the shared profile requires is set; the data dir is the one the unit opens.
        expect(config.shared).not.toBeNull();
        expect(config.databaseUrl).toBeDefined();
        expect(config.redisUrl).toBeDefined();
        expect(config.dataDir.startsWith(`${DATA_DIR}/`)).toBe(true);
      }
      if (role === 'router') expect(config.databaseUrl ?? config.router.backends).toBeDefined();
      if (role === 'worker') expect(config.databaseUrl).toBeDefined();
    },
  );

  it.each(ROLES)(
    '$unit: with deploy/static-store/static-store.env added it is valid and uses the static-HTTP store',
    async ({ unit: name }) => {
      const env = {
        ...(await unitEnvironment(await unit(name), '1')),
        ...parseEnvFile(await readFile(path.join(DEPLOY, 'static-store/static-store.env'), 'utf8')),
      };
      const config = loadConfig(env, '/', deploySecret);
      expect(config.storage.url).toBe('http://10.0.0.20:8081/arkvory/');
      // The URL is the example nginx site's address and location.
      const site = await readFile(path.join(DEPLOY, 'static-store/arkvory-store.conf'), 'utf8');
      expect(site).toContain('listen 10.0.0.20:8081;');
      expect(site).toContain('location /arkvory/ {');
    },
  );

  it.each(ROLES.filter((r) => r.role !== 'router' && r.role !== 'rules-service'))(
    '$unit: with deploy/s3-store/s3-store.env and the credentials example added, its placeholder keys refused, it uses the S3 store of the SeaweedFS example',
    async ({ unit: name }) => {
      const read = (file: string) => readFile(path.join(DEPLOY, 's3-store', file), 'utf8');
      const example = {
        ...(await unitEnvironment(await unit(name), '1')),
        ...parseEnvFile(await read('s3-store.env')),
        ...parseEnvFile(await read('s3-credentials.env.example')),
      };
      // Copied unchanged, the example's keys are refused: the SeaweedFS example's s3.json holds the same pair.
      expect(() => loadConfig(example, '/', deploySecret)).toThrow(
        /AWS_ACCESS_KEY_ID: an example's placeholder[\s\S]*AWS_SECRET_ACCESS_KEY: an example's placeholder/,
      );
      const env = { ...example, ...S3_KEYS };
      const config = loadConfig(env, '/', deploySecret);
      expect(config.storage.s3).toMatchObject({
        location: { bucket: 'arkvory-artifacts', prefix: 'prod/' },
        endpoint: 'http://10.0.0.30:8333',
        credentials: { accessKeyId: S3_KEYS.AWS_ACCESS_KEY_ID },
      });
      // Without the credentials file the configuration is refused, naming both variables.
      expect(() =>
        loadConfig(
          { ...(env as Record<string, string>), AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '' },
          '/',
          deploySecret,
        ),
      ).toThrow(/AWS_ACCESS_KEY_ID[\s\S]*AWS_SECRET_ACCESS_KEY/);
      // The endpoint is the SeaweedFS example's S3 port, and its identity for Arkvory has the same key.
      expect(await read('seaweedfs-s3.service')).toContain('-ip=10.0.0.30 ');
      expect(await read('seaweedfs-s3.service')).toContain('-s3.port=8333 ');
      const identities = JSON.parse(await read('s3.json')) as {
        identities: Array<{
          name: string;
          credentials: Array<{ accessKey: string; secretKey: string }>;
          actions: string[];
        }>;
      };
      const arkvory = identities.identities.find((i) => i.name === 'arkvory')!;
      expect(arkvory.credentials[0]).toEqual({
        accessKey: example.AWS_ACCESS_KEY_ID,
        secretKey: example.AWS_SECRET_ACCESS_KEY,
      });
      // No key of the S3 server's example is one a gateway would take as it is.
      for (const { accessKey, secretKey } of identities.identities.flatMap((i) => i.credentials))
        expect([accessKey, secretKey].filter((k) => !isPlaceholderSecret(k))).toEqual([]);
      expect(arkvory.actions).toEqual(['Read:arkvory-artifacts', 'Write:arkvory-artifacts', 'List:arkvory-artifacts']);
    },
  );

  it('the writer and the reader examples store the identical download policy, on different ports', async () => {
    const writer = loadConfig(await unitEnvironment(await unit('arkvory-writer.service'), '1'), '/', deploySecret);
    const reader = loadConfig(await unitEnvironment(await unit('arkvory-reader@.service'), '1'), '/', deploySecret);
    expect(reader.shared).toEqual({ ...writer.shared, slot: 1 });
    expect(writer.shared!.slot).toBe(0);
    expect(reader.port).not.toBe(writer.port);
    expect(reader.dataDir).toBe(writer.dataDir);
  });
});

describe('systemd units', () => {
  it.each(ROLES)(
    '$unit is hardened: own user, strict read-only system, writes only to the data dir, restart with a delay',
    async ({ unit: name, writes }) => {
      const u = await unit(name);
      expect(service(u, 'User')).toEqual(['arkvory']);
      expect(service(u, 'Group')).toEqual(['arkvory']);
      expect(service(u, 'NoNewPrivileges')).toEqual(['yes']);
      expect(service(u, 'ProtectSystem')).toEqual(['strict']);
      expect(service(u, 'ProtectHome')).toEqual(['yes']);
      expect(service(u, 'PrivateTmp')).toEqual(['yes']);
      expect(service(u, 'CapabilityBoundingSet')).toEqual(['']);
      expect(service(u, 'ReadWritePaths')).toEqual(writes ? [DATA_DIR] : []);
      expect(service(u, 'Restart')).toEqual(['on-failure']);
      expect(Number.parseInt(service(u, 'RestartSec')[0] ?? '0', 10)).toBeGreaterThanOrEqual(2);
      // Exit 2 is an invalid configuration: restarting cannot fix it.
      expect(service(u, 'RestartPreventExitStatus')).toEqual(['2']);
      expect(service(u, 'ExecStart')[0]).toMatch(/bin\/arkvory\.js serve$/);
      expect(u.sections.get('Install')?.get('WantedBy')).toEqual(['multi-user.target']);
    },
  );

  it.each(ROLES)(
    '$unit listens only where it may: no port below 1024 without CAP_NET_BIND_SERVICE',
    async ({ unit: name }) => {
      const u = await unit(name);
      const config = loadConfig(await unitEnvironment(u, '1'), '/', deploySecret);
      const ports = [config.port, config.metrics.port].filter((p): p is number => p !== undefined);
      expect(ports.length).toBeGreaterThan(0);
      if (!mayBindPrivileged(u)) for (const port of ports) expect(port, `${name} port`).toBeGreaterThanOrEqual(1024);
    },
  );

  it('the router listens on the port docs/deploy.md gives clients and the firewall opens', async () => {
    const config = loadConfig(await unitEnvironment(await unit('arkvory-router.service'), '1'), '/', deploySecret);
    const docs = await readFile(path.join(ROOT, 'docs/deploy.md'), 'utf8');
    expect(docs).toContain(`| router | 10.213.24.30 | \`ARKVORY_ROLE=router\` | ${config.port} |`);
    expect(docs).toContain(`| clients | router | ${config.port} | the single entry address |`);
  });

  it.each(UNITS)(
    '%s: its database login is the documented one of its role, its secrets come from its own credentials',
    async (name) => {
      const u = await unit(name);
      const env = await unitEnvironment(u, '1');
      const group = ROLES.find((r) => r.unit === name)?.group ?? 'arkvory_maintenance';
      const login = new URL(env.ARKVORY_DATABASE_URL!).username;
      expect((await documentedLogins()).get(login), login).toBe(group);
      expect(inlineSecrets(env)).toEqual([]);
      // Every %d/… file named is a credential the unit loads, each from /etc/arkvory/credentials.
      const loaded = loadCredentials(u);
      for (const line of service(u, 'Environment')) {
        const file = /=%d\/(.+)$/.exec(line)?.[1];
        if (file !== undefined)
          expect(
            loaded.map((c) => c.name),
            line,
          ).toContain(file);
      }
      for (const { source } of loaded) expect(source).toMatch(/^\/etc\/arkvory\/credentials\/[\w-]+$/);
      const config = loadConfig(env, '/', deploySecret);
      expect(config.secretSources.ARKVORY_DATABASE_PASSWORD).toBe('file');
    },
  );

  it('no env file under deploy/env holds a secret: no password, token or password in a URL', async () => {
    const files = (await readdir(path.join(DEPLOY, 'env'))).filter((f) => f.endsWith('.env'));
    expect(files.length).toBeGreaterThan(5);
    for (const file of files) {
      const env = parseEnvFile(await readFile(path.join(DEPLOY, 'env', file), 'utf8'));
      expect(inlineSecrets(env), file).toEqual([]);
    }
    // The check sees what it must refuse.
    expect(
      inlineSecrets({
        ARKVORY_DATABASE_URL: 'postgres://u:pw@db/arkvory',
        ARKVORY_REDIS_URL: 'redis://a@r1:6379,redis://b:pw@r2:6379',
        ARKVORY_RULES_SERVICE_TOKEN: 't',
        AWS_SECRET_ACCESS_KEY: 's',
      }),
    ).toHaveLength(4);
  });

  it.each(UNITS.flatMap((name) => STORES.map((store) => ({ name, store: store.name }))))(
    "$name with the $store: every path its process writes is writable under the unit's sandboxing",
    async ({ name, store }) => {
      const u = await unit(name);
      for (const slot of name.includes('@') ? ['1', '2'] : ['1']) {
        const env = await storeEnvironment(u, slot, STORES.find((s) => s.name === store)!);
        loadConfig(env, '/', deploySecret);
        // Every directory variable set (a new one included) is written, but the storage root of a
        // process that only reads it; and the backup unit's BACKUP_DIR.
        const readsOnly = (variable: string) =>
          variable === 'ARKVORY_DATA_DIR' && ROLES.find((r) => r.unit === name)?.writes !== true;
        const written = Object.entries(env)
          .filter(([variable, value]) => value !== '' && /^(?:ARKVORY_\w+|BACKUP)_DIR$/.test(variable))
          .filter(([variable]) => !readsOnly(variable))
          .map(([, value]) => path.posix.resolve('/', value));
        if (name === 'arkvory-writer.service') expect(written).toContain(`${DATA_DIR}/storage`);
        const sandbox = unitSandbox(u, slot);
        expect(
          written.filter((file) => !sandbox.writes(file)),
          `${name} (slot ${slot}) may write only ${sandbox.writable.join(', ')}`,
        ).toEqual([]);
      }
    },
  );

  it.each(STORES)('with the $name no two processes of one host share a slice cache directory', async (store) => {
    const dirs: Array<[string, string]> = [];
    for (const { unit: name, role } of ROLES)
      for (const slot of name.includes('@') ? ['1', '2'] : ['1']) {
        const config = loadConfig(await storeEnvironment(await unit(name), slot, store), '/', deploySecret);
        if (store.remote && (role === 'api' || role === 'reader'))
          expect(config.sliceCache.dir, `${name} ${slot}: the cache is on`).toBeDefined();
        if (config.sliceCache.dir !== undefined) dirs.push([`${name} ${slot}`, config.sliceCache.dir]);
      }
    for (const [a, dirA] of dirs)
      for (const [b, dirB] of dirs)
        if (a !== b)
          expect(dirA === dirB || dirB.startsWith(`${dirA}/`), `${a} and ${b}: ${dirA}, ${dirB}`).toBe(false);
  });

  it('the sandbox check refuses what systemd would refuse', () => {
    const u = parseUnit(
      'x.service',
      '[Service]\nProtectSystem=strict\nReadWritePaths=/var/lib/x -/srv/y\nReadOnlyPaths=/var/lib/x/ro\nCacheDirectory=x/%i\nStateDirectory=s\n',
    );
    const sandbox = unitSandbox(u, '3');
    expect(['/var/lib/x/a', '/srv/y', '/var/cache/x/3/z', '/var/lib/s', '/tmp/t'].filter(sandbox.writes)).toEqual([
      '/var/lib/x/a',
      '/srv/y',
      '/var/cache/x/3/z',
      '/var/lib/s',
    ]);
    expect(
      ['/var/lib/x/ro/a', '/var/cache/x', '/var/cache/x/4', '/var/lib/xy', '/etc/x'].filter(sandbox.writes),
    ).toEqual([]);
  });

  it('the reader unit is a template: the instance is the slot and picks its own env file', async () => {
    const u = await unit('arkvory-reader@.service');
    expect(service(u, 'Environment')).toContain('ARKVORY_GATEWAY_SLOT=%i');
    expect(service(u, 'EnvironmentFile')).toContain('/etc/arkvory/reader-%i.env');
  });

  it('systemd-analyze verify accepts every unit (installed at this checkout, with the env examples)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-units-'));
    try {
      const names: string[] = [];
      for (const { unit: name } of ROLES) {
        const text = (await readFile(path.join(DEPLOY, 'systemd', name), 'utf8'))
          .replaceAll('/opt/arkvory', ROOT)
          .replaceAll('/etc/arkvory/reader-%i.env', path.join(DEPLOY, 'env/reader-1.env'))
          .replaceAll('/etc/arkvory/', `${path.join(DEPLOY, 'env')}/`);
        const target = name.replace('@.service', '@1.service');
        await writeFile(path.join(dir, target), text);
        names.push(target);
      }
      // Present on Debian with the systemd package; .ci/run installs it when missing.
      const { stdout, stderr } = await run(
        'systemd-analyze',
        ['verify', '--man=no', ...names.map((n) => path.join(dir, n))],
        { cwd: dir },
      );
      const about = `${stdout}${stderr}`.split('\n').filter((line) => line.includes(dir));
      expect(about).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('Kubernetes sidecar example', () => {
  it('parses, shares one volume between the store and Arkvory, and probes /health/live and /health/status', async () => {
    const docs = parseAllDocuments(await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8'));
    for (const doc of docs) expect(doc.errors).toEqual([]);
    const objects = docs.map(
      (d) =>
        d.toJS() as {
          kind: string;
          metadata: { name: string };
          spec?: any;
          data?: Record<string, string>;
          stringData?: Record<string, string>;
        },
    );
    const deployment = objects.find((o) => o.kind === 'Deployment')!;
    const pod = deployment.spec.template.spec;
    const containers = pod.containers as Array<{
      name: string;
      volumeMounts: Array<{ name: string }>;
      livenessProbe?: any;
      readinessProbe?: any;
      envFrom?: any[];
    }>;
    expect(containers.map((c) => c.name).sort()).toEqual(['arkvory', 'storage']);
    const [arkvory, storage] = [
      containers.find((c) => c.name === 'arkvory')!,
      containers.find((c) => c.name === 'storage')!,
    ];
    const shared = arkvory.volumeMounts
      .map((m) => m.name)
      .filter((n) => storage.volumeMounts.some((m) => m.name === n));
    expect(shared).toHaveLength(1);
    expect(pod.volumes.map((v: { name: string }) => v.name)).toContain(shared[0]);
    expect(arkvory.livenessProbe.httpGet.path).toBe('/health/live');
    expect(arkvory.readinessProbe.httpGet.path).toBe('/health/status');
    // The environment it gets is a valid configuration.
    const env: Record<string, string> = {};
    for (const ref of arkvory.envFrom ?? []) {
      const source = objects.find((o) => o.metadata.name === (ref.configMapRef ?? ref.secretRef).name)!;
      Object.assign(env, source.data ?? source.stringData);
    }
    const config = loadConfig(env, '/', deploySecret);
    expect(config.role).toBe('api');
    expect(config.metrics.token).toBeDefined();
    const mount = (arkvory.volumeMounts as Array<{ name: string; mountPath: string }>).find(
      (m) => m.name === shared[0],
    )!;
    expect(config.dataDir).toBe(mount.mountPath);
  });
});

describe('Kubernetes containers run unprivileged', () => {
  async function manifest() {
    const objects = parseAllDocuments(await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8')).map(
      (d) => d.toJS() as { kind: string; metadata: { name: string }; spec: any; data?: Record<string, string> },
    );
    const deployment = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec;
    const cron = objects.find((o) => o.kind === 'CronJob')!.spec.jobTemplate.spec.template.spec;
    return { objects, pods: [deployment, cron], deployment };
  }

  it('every container: non-root, every capability dropped, no escalation, a read-only root, no port below 1024', async () => {
    const { pods } = await manifest();
    for (const pod of pods) {
      const ports: number[] = [];
      for (const c of pod.containers as Array<any>) {
        const sc = c.securityContext ?? {};
        expect(sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot, c.name).toBe(true);
        expect(sc.runAsUser ?? pod.securityContext?.runAsUser, c.name).toBeGreaterThan(0);
        expect(sc.allowPrivilegeEscalation, c.name).toBe(false);
        expect(sc.readOnlyRootFilesystem, c.name).toBe(true);
        expect(sc.capabilities?.drop, c.name).toEqual(['ALL']);
        expect(sc.capabilities?.add ?? [], c.name).toEqual([]);
        for (const { containerPort } of c.ports ?? []) {
          expect(containerPort, c.name).toBeGreaterThanOrEqual(1024);
          ports.push(containerPort);
        }
      }
      // The containers of a pod share one network namespace.
      expect(new Set(ports).size).toBe(ports.length);
    }
  });

  it('the manifest carries no usable secret: the Secret its pods mount is made by the command its header gives, from new values', async () => {
    const { objects, pods } = await manifest();
    const text = await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8');
    // Applied unchanged, nothing of it may open what a secret guards.
    const withValues = objects.filter(
      (o) => o.kind === 'Secret' && Object.keys({ ...o.data, ...(o as { stringData?: object }).stringData }).length > 0,
    );
    expect(withValues.map((o) => o.metadata.name)).toEqual([]);
    const command = /^# +kubectl create secret generic (\S+) \\\n((?:# +--from-.*\n)+)/m.exec(text);
    expect(command, 'the header gives the kubectl command').not.toBeNull();
    const sources = new Map(
      [...command![2]!.matchAll(/--from-(file|literal)=([\w-]+)=(.+?)(?: \\)?$/gm)].map((m) => [
        m[2]!,
        `${m[1]}=${m[3]}`,
      ]),
    );
    // Every key a container reads is in it, a literal only from a generator, never a value written here.
    const env: Record<string, string> = {};
    for (const o of objects)
      if (o.kind === 'ConfigMap' && o.metadata.name === 'arkvory-config') Object.assign(env, o.data);
    let keys = 0;
    for (const pod of pods) {
      const secretVolumes = (pod.volumes as Array<any>).filter((v) => v.secret?.secretName === command![1]);
      expect(secretVolumes).toHaveLength(1);
      for (const c of pod.containers as Array<any>) {
        const own = { ...env, ...Object.fromEntries((c.env ?? []).map((e: any) => [e.name, e.value])) };
        const mount = (c.volumeMounts as Array<any>).find((m) => m.name === secretVolumes[0].name);
        if (mount === undefined) continue;
        for (const [name, file] of Object.entries(own))
          if (name.endsWith('_FILE') && file.startsWith(`${mount.mountPath}/`)) {
            const key = path.basename(file);
            expect(sources.get(key), `${c.name}: ${name}`).toMatch(/^file=\.\/|^literal="\$\(openssl rand /);
            keys++;
          }
      }
    }
    expect(keys).toBeGreaterThanOrEqual(4);
    expect(sources.get('metrics-token')).toMatch(/^literal=/);
  });

  it('the storage nginx listens on loopback only, serves the shared volume and writes only to its writable volume', async () => {
    const { objects, deployment } = await manifest();
    const storage = (deployment.containers as Array<any>).find((c) => c.name === 'storage')!;
    const mounts = storage.volumeMounts as Array<{ name: string; mountPath: string; readOnly?: boolean }>;
    const command = storage.command as string[];
    expect(command[0]).toBe('nginx');
    const confPath = command[command.indexOf('-c') + 1]!;
    const confMount = mounts.find((m) => confPath.startsWith(`${m.mountPath}/`))!;
    const volume = (deployment.volumes as Array<any>).find((v) => v.name === confMount.name)!;
    const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume.configMap.name)!;
    const conf = configMap.data![path.basename(confPath)]!;
    expect(conf).toMatch(/^daemon off;$/m);
    expect(conf).not.toMatch(/^\s*user\s/m);
    const writable = mounts.filter((m) => !m.readOnly).map((m) => m.mountPath);
    const written = [
      /^pid (\S+);$/m.exec(conf)?.[1],
      ...[...conf.matchAll(/^\s*(?:client_body|proxy|fastcgi|uwsgi|scgi)_temp_path (\S+);$/gm)].map((m) => m[1]),
    ];
    expect(written).toHaveLength(6);
    for (const file of written) {
      expect(file, 'the pid file and every temporary path are set').toBeDefined();
      expect(
        writable.some((dir) => file!.startsWith(`${dir}/`)),
        file,
      ).toBe(true);
    }
    // It serves every blob with no key: other pods reach a pod's own addresses, never its loopback.
    const listens = [...conf.matchAll(/^\s*listen (\S+);$/gm)].map((m) => m[1]);
    expect(listens).toEqual(['127.0.0.1:8081']);
    expect(storage.ports ?? [], 'a loopback listener is no port of the pod').toEqual([]);
    const root = /^\s*root (\S+);$/m.exec(conf)?.[1];
    const arkvory = (deployment.containers as Array<any>).find((c) => c.name === 'arkvory')!;
    const shared = mounts.find((m) => m.mountPath === root)!;
    expect(shared.readOnly).toBe(true);
    expect(arkvory.volumeMounts.map((m: { name: string }) => m.name)).toContain(shared.name);
  });
});

describe('PostgreSQL snippet', () => {
  it('sets TCP keepalives so a gateway cut off without a FIN loses its barriers in seconds', async () => {
    const text = await readFile(path.join(DEPLOY, 'postgresql/arkvory.conf'), 'utf8');
    const settings = Object.fromEntries([...text.matchAll(/^(\w+) = (\d+)/gm)].map((m) => [m[1]!, Number(m[2])]));
    expect(settings.tcp_keepalives_idle).toBeGreaterThan(0);
    expect(settings.tcp_keepalives_interval).toBeGreaterThan(0);
    expect(settings.tcp_keepalives_count).toBeGreaterThan(0);
    // Dead within the 10 s lease reservation's order of magnitude, not the system default of hours.
    expect(
      settings.tcp_keepalives_idle! + settings.tcp_keepalives_interval! * settings.tcp_keepalives_count!,
    ).toBeLessThanOrEqual(60);
  });
});

describe('backup service, timer and CronJob', () => {
  const BACKUP_DIR = '/var/backups/arkvory';

  it('arkvory-backup.service: a hardened oneshot running `arkvory backup --keep ${BACKUP_KEEP} ${BACKUP_DIR}` as the maintenance login', async () => {
    const u = await unit('arkvory-backup.service');
    expect(service(u, 'Type')).toEqual(['oneshot']);
    expect(service(u, 'User')).toEqual(['arkvory']);
    expect(service(u, 'NoNewPrivileges')).toEqual(['yes']);
    expect(service(u, 'ProtectSystem')).toEqual(['strict']);
    expect(service(u, 'CapabilityBoundingSet')).toEqual(['']);
    // It writes the backups and nothing else: never the data dir it reads.
    expect(service(u, 'ReadWritePaths')).toEqual([BACKUP_DIR]);
    expect(service(u, 'ExecStart')).toEqual([
      '/opt/arkvory/node_modules/.bin/node /opt/arkvory/bin/arkvory.js backup --keep ${BACKUP_KEEP} ${BACKUP_DIR}',
    ]);
    // Its own env file: not the writer's, whose login may not read every table (test/contract/backup-unit.test.ts runs it).
    expect(service(u, 'EnvironmentFile')).toEqual(['/etc/arkvory/backup.env']);
    const env = await unitEnvironment(u, '1');
    const config = loadConfig(env, '/', deploySecret);
    expect((await documentedLogins()).get(new URL(config.databaseUrl!).username)).toBe('arkvory_maintenance');
    expect(config.secretSources.ARKVORY_DATABASE_PASSWORD).toBe('file');
    // The writer's store; the retention is a positive count; the directory is the writable one.
    const writer = loadConfig(await unitEnvironment(await unit('arkvory-writer.service'), '1'), '/', deploySecret);
    expect(config.dataDir).toBe(writer.dataDir);
    expect(config.redisUrl).toBe(writer.redisUrl);
    expect(Number(env.BACKUP_KEEP)).toBeGreaterThanOrEqual(1);
    expect(Number.isInteger(Number(env.BACKUP_KEEP))).toBe(true);
    expect(env.BACKUP_DIR).toBe(BACKUP_DIR);
  });

  it('arkvory-backup.timer starts the service daily, catching up a missed run', async () => {
    const file = path.join(DEPLOY, 'systemd', 'arkvory-backup.timer');
    const t = parseUnit(file, await readFile(file, 'utf8'));
    const timer = t.sections.get('Timer')!;
    expect(timer.get('OnCalendar')).toEqual(['daily']);
    expect(timer.get('Persistent')).toEqual(['true']);
    expect(timer.get('Unit')).toEqual(['arkvory-backup.service']);
    expect(t.sections.get('Install')?.get('WantedBy')).toEqual(['timers.target']);
  });

  it('systemd-analyze verify accepts the backup service and timer', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-units-'));
    try {
      const names = ['arkvory-backup.service', 'arkvory-backup.timer'];
      for (const name of names) {
        const text = (await readFile(path.join(DEPLOY, 'systemd', name), 'utf8'))
          .replaceAll('/opt/arkvory', ROOT)
          .replaceAll('/etc/arkvory/', `${path.join(DEPLOY, 'env')}/`);
        await writeFile(path.join(dir, name), text);
      }
      const { stdout, stderr } = await run(
        'systemd-analyze',
        ['verify', '--man=no', ...names.map((n) => path.join(dir, n))],
        { cwd: dir },
      );
      expect(`${stdout}${stderr}`.split('\n').filter((line) => line.includes(dir))).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the Kubernetes CronJob backs up daily, never overlapping, from the gateway volume at the gateway path', async () => {
    const docs = parseAllDocuments(await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8'));
    const objects = docs.map(
      (d) =>
        d.toJS() as {
          kind: string;
          metadata: { name: string };
          spec?: any;
          data?: Record<string, string>;
          stringData?: Record<string, string>;
        },
    );
    const cron = objects.find((o) => o.kind === 'CronJob')!;
    expect(cron.spec.concurrencyPolicy).toBe('Forbid');
    expect(cron.spec.schedule.split(' ')).toHaveLength(5);
    const pod = cron.spec.jobTemplate.spec.template.spec;
    const [container] = pod.containers as Array<{
      args: string[];
      env: Array<{ name: string; value: string }>;
      envFrom: any[];
      volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
    }>;
    // The image's entrypoint (tini, node /app/bin/arkvory.js) runs `backup`.
    expect(container!.args.slice(0, 3)).toEqual(['backup', '--keep', '$(BACKUP_KEEP)']);
    expect(Number(container!.env.find((e) => e.name === 'BACKUP_KEEP')?.value)).toBeGreaterThanOrEqual(1);
    const destination = container!.args.at(-1)!;
    const backups = container!.volumeMounts.find((m) => m.mountPath === destination)!;
    expect(pod.volumes.find((v: { name: string }) => v.name === backups.name).persistentVolumeClaim.claimName).toBe(
      objects.find((o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === 'arkvory-backups')!.metadata.name,
    );
    // Same configuration as the gateway, and its volume where ARKVORY_DATA_DIR says, read-only.
    const env: Record<string, string> = {};
    for (const ref of container!.envFrom) {
      const source = objects.find((o) => o.metadata.name === (ref.configMapRef ?? ref.secretRef).name)!;
      Object.assign(env, source.data ?? source.stringData);
    }
    const config = loadConfig(env, '/', deploySecret);
    const data = container!.volumeMounts.find((m) => m.mountPath === config.dataDir)!;
    expect(data.readOnly).toBe(true);
    const claim = pod.volumes.find((v: { name: string }) => v.name === data.name).persistentVolumeClaim.claimName;
    const deployment = objects.find((o) => o.kind === 'Deployment')!;
    expect(
      deployment.spec.template.spec.volumes.map(
        (v: { persistentVolumeClaim?: { claimName: string } }) => v.persistentVolumeClaim?.claimName,
      ),
    ).toContain(claim);
  });
});

/** What a container mounts: volumes (host:target[:options]), secrets (name,target=…,uid=…,mode=…), tmpfs. */
interface ContainerMounts {
  volumes: string[];
  secrets: Array<{ name: string; target: string; options: Record<string, string> }>;
}

/** A podman `--secret`/Quadlet `Secret=` spec: a relative target is under /run/secrets. */
function parseSecret(spec: string): ContainerMounts['secrets'][number] {
  const [name, ...rest] = spec.split(',');
  const options = Object.fromEntries(rest.map((o) => o.split('=') as [string, string]));
  const target = options.target ?? name!;
  return { name: name!, target: target.startsWith('/') ? target : `/run/secrets/${target}`, options };
}

/**
 * The files and directories a container's environment names that no volume or secret of it provides,
 * and the secret files the gateway would refuse or fail to read as the image's user (readSecretFile:
 * owned by it, no world bits, group bits only for its own group).
 */
function containerFileProblems(env: Record<string, string>, mounts: ContainerMounts, uid: number): string[] {
  const problems: string[] = [];
  const targets = mounts.volumes.map((v) => v.split(':')[1]!);
  const secretFiles = new Set(SECRET_FILE_VARIABLES.map((v) => v.file));
  for (const [name, value] of Object.entries(env)) {
    if (!(name.endsWith('_FILE') || name === 'ARKVORY_DATA_DIR') || !value.startsWith('/')) continue;
    const secret = mounts.secrets.find((s) => s.target === value);
    if (secretFiles.has(name)) {
      if (secret === undefined) problems.push(`${name}=${value}: not a mounted secret`);
      else {
        const mode = Number.parseInt(secret.options.mode ?? '0444', 8);
        const owner = Number(secret.options.uid ?? 0);
        const group = Number(secret.options.gid ?? 0);
        if (owner !== uid)
          problems.push(`${name}: secret ${secret.name} is owned by uid ${owner}, not the image's ${uid}`);
        if ((mode & 0o007) !== 0 || ((mode & 0o070) !== 0 && group !== uid))
          problems.push(`${name}: secret ${secret.name} has mode ${secret.options.mode ?? '0444'}`);
      }
    } else if (secret === undefined && !targets.some((t) => value === t || value.startsWith(`${t}/`)))
      problems.push(`${name}=${value}: under no volume or secret`);
  }
  return problems;
}

/** `podman run` commands of a markdown text, continuation lines joined, split into words. */
function podmanRuns(markdown: string): string[][] {
  const joined = markdown.replaceAll('\\\n', ' ');
  return [...joined.matchAll(/^podman run (.+)$/gm)].map((m) =>
    m[1]!
      .replace(/\s+#.*$/, '')
      .trim()
      .split(/\s+/),
  );
}

describe('the container image in the examples', () => {
  /** What deploy/container/build.sh gives the image: its name, user and volumes (its config lines). */
  async function imageFacts() {
    const script = await readFile(path.join(DEPLOY, 'container/build.sh'), 'utf8');
    const version = (JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { version: string })
      .version;
    const name = /^IMAGE_NAME=\$\{ARKVORY_IMAGE_NAME:-(\S+)\}$/m.exec(script)?.[1];
    const uid = Number(/^IMAGE_UID=(\d+)$/m.exec(script)?.[1]);
    const volumes = [...script.matchAll(/--config\.volume (\S+)/g)].map((m) => m[1]!).sort();
    expect(name).toBeDefined();
    expect(volumes.length).toBeGreaterThan(0);
    return { image: `${name}:${version}`, uid, volumes };
  }

  it('the image holds the tracked app files only: an untracked or ignored file of the checkout stays out', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-app-files-'));
    try {
      const clone = path.join(dir, 'checkout');
      await run('git', ['clone', '--quiet', '--shared', ROOT, clone]);
      const appDirs = ['bin', 'lib', 'proxy', 'policy', 'storage-adapter', 'migrations', 'client'];
      const tracked = (await run('git', ['ls-files', '--', ...appDirs], { cwd: clone })).stdout
        .split('\n')
        .filter((f) => f !== '' && !f.endsWith('.test.ts'))
        .sort();
      expect(tracked).toContain('bin/arkvory.js');
      // What a working tree may hold beside the sources: untracked files, and ignored ones (data/, *.log).
      const stray = ['proxy/.env', 'lib/server.key', 'bin/scratch.js', 'proxy/data/blob', 'storage-adapter/debug.log'];
      for (const file of stray) {
        await mkdir(path.dirname(path.join(clone, file)), { recursive: true });
        await writeFile(path.join(clone, file), 'not for the image');
      }
      const script = path.join(DEPLOY, 'container/app-files.sh');
      // What build.sh hashes, and what it copies into the rootfs's /app.
      const listed = (await run('bash', [script, clone])).stdout.split('\n').filter((f) => f !== '');
      const staged = path.join(dir, 'rootfs/app');
      await run('bash', [script, clone, staged]);
      const copied = (await filesUnder(staged)).map((f) => path.relative(staged, f));
      expect(copied.filter((f) => stray.includes(f))).toEqual([]);
      expect(copied.sort()).toEqual([...tracked, 'package-lock.json', 'package.json'].sort());
      expect(listed.sort()).toEqual(tracked);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the Kubernetes gateway and backup run the built image as its user, with its entrypoint, a read-only root and every image volume mounted', async () => {
    const { image, uid, volumes } = await imageFacts();
    const objects = parseAllDocuments(await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8')).map(
      (d) => d.toJS() as { kind: string; spec: any },
    );
    const pods = [
      objects.find((o) => o.kind === 'Deployment')!.spec.template.spec,
      objects.find((o) => o.kind === 'CronJob')!.spec.jobTemplate.spec.template.spec,
    ];
    for (const pod of pods) {
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: uid, runAsGroup: uid, fsGroup: uid });
      const ours = (pod.containers as Array<any>).filter((c) => c.image?.startsWith('localhost/arkvory'));
      expect(ours).toHaveLength(1);
      const container = ours[0];
      expect(container.image).toBe(image);
      // `command` would replace the entrypoint, and tini with it (PID 1 must forward SIGTERM).
      expect(container.command).toBeUndefined();
      expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
      const mounted = (container.volumeMounts as Array<{ mountPath: string }>).map((m) => m.mountPath).sort();
      expect(mounted).toEqual(expect.arrayContaining(volumes));
    }
  });

  it("the podman Quadlet unit runs the built image with the writer's env file, read-only, with the data dir as its only volume to write", async () => {
    const { image, uid } = await imageFacts();
    const file = path.join(DEPLOY, 'podman/arkvory-writer.container');
    const u = parseUnit(file, await readFile(file, 'utf8'));
    const container = u.sections.get('Container')!;
    expect(container.get('Image')).toEqual([image]);
    expect(container.get('Exec')).toEqual(['serve']);
    expect(container.get('ReadOnly')).toEqual(['true']);
    expect(container.get('Network')).toEqual(['host']);
    expect(container.get('DropCapability')).toEqual(['ALL']);
    expect(container.get('NoNewPrivileges')).toEqual(['true']);
    const env: Record<string, string> = {};
    for (const envFile of container.get('EnvironmentFile') ?? [])
      Object.assign(env, parseEnvFile(await readFile(envExample(envFile), 'utf8')));
    for (const line of container.get('Environment') ?? []) {
      const [key, value] = environmentLine(line);
      env[key] = value;
    }
    const config = loadConfig(env, '/', deploySecret);
    expect(config.role).toBe('api');
    expect(config.shared?.slot).toBe(0);
    // Without capabilities it cannot bind below 1024.
    expect(config.port).toBeGreaterThanOrEqual(1024);
    const volumes = container.get('Volume') ?? [];
    const writable = volumes.filter((v) => !v.endsWith(':ro')).map((v) => v.split(':')[1]);
    expect(writable).toEqual([config.dataDir]);
    // Every file its environment names is mounted; each secret is a private file of the image's user.
    const mounts = { volumes, secrets: (container.get('Secret') ?? []).map(parseSecret) };
    expect(containerFileProblems(env, mounts, uid)).toEqual([]);
    // Every secret the host unit takes from a credential file, the container takes from a file too.
    const host = loadConfig(await unitEnvironment(await unit('arkvory-writer.service'), '1'), '/', deploySecret);
    for (const [secret, source] of Object.entries(host.secretSources))
      if (source === 'file') expect(config.secretSources[secret], secret).toBe('file');
    expect(u.sections.get('Service')?.get('RestartPreventExitStatus')).toEqual(['2']);
  });

  it("docs/deploy.md's `podman run` lines mount every file their environment names, secrets as private files", async () => {
    const { image, uid } = await imageFacts();
    const runs = podmanRuns(await readFile(path.join(ROOT, 'docs/deploy.md'), 'utf8'));
    expect(runs.length).toBeGreaterThanOrEqual(3);
    const logins = await documentedLogins();
    let configured = 0;
    for (const words of runs) {
      const env: Record<string, string> = {};
      const mounts: ContainerMounts = { volumes: [], secrets: [] };
      let i = 0;
      for (; i < words.length && words[i] !== image; i++) {
        const [flag, value] = [words[i]!, words[i + 1] ?? ''];
        if (flag === '-v' || flag === '--volume') mounts.volumes.push(value);
        else if (flag === '--secret') mounts.secrets.push(parseSecret(value));
        else if (flag === '--env-file') Object.assign(env, parseEnvFile(await readFile(envExample(value), 'utf8')));
        else if (flag === '-e' || flag === '--env') {
          const [key, v] = environmentLine(value);
          env[key] = v;
        } else continue;
        i++;
      }
      expect(words[i], words.join(' ')).toBe(image);
      const command = words[i + 1] ?? 'serve';
      if (env.ARKVORY_DATABASE_URL === undefined) continue;
      configured++;
      expect(containerFileProblems(env, mounts, uid), words.join(' ')).toEqual([]);
      const config = loadConfig(env, '/', deploySecret);
      expect(config.secretSources.ARKVORY_DATABASE_PASSWORD).toBe('file');
      // Migrations need the migrator's login; a gateway its role's.
      const group = logins.get(new URL(config.databaseUrl!).username);
      expect(group).toBe(command === 'migrate' ? 'arkvory_migrator' : 'arkvory_writer');
    }
    expect(configured).toBeGreaterThanOrEqual(2);
  });
});
