/**
 * deploy/grafana/arkvory-dashboard.json against running processes: every metric family an
 * expression of the dashboard names is exported by a writer (`/metrics`) or a router (its
 * ARKVORY_METRICS_PORT); and every gateway and router family of docs/metrics.md has a panel.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../harness/index.ts';
import { useTestDatabase } from '../support/database.ts';
import { ROOT, startGateway, type GatewayProcess } from '../support/gateway.ts';

const DASHBOARD = path.join(ROOT, 'deploy', 'grafana', 'arkvory-dashboard.json');
const db = useTestDatabase();
let writer: GatewayProcess;
let router: GatewayProcess;
let routerMetricsPort: number;

beforeAll(async () => {
  writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, timeoutMs: 90_000 });
  routerMetricsPort = await freeLoopbackPort();
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: writer.url,
      ARKVORY_METRICS_PORT: String(routerMetricsPort),
    },
    timeoutMs: 60_000,
  });
}, 200_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  await writer?.stop('SIGTERM');
});

interface Panel {
  title?: string;
  targets?: Array<{ expr: string }>;
  panels?: Panel[];
}

/** The metric families a PromQL expression names: `foo_bucket`/`_sum`/`_count` of a histogram count as `foo`. */
function metricNames(expr: string): string[] {
  const withoutLabels = expr.replace(/\{[^}]*\}/g, '{}').replace(/"[^"]*"/g, '""');
  return [...withoutLabels.matchAll(/\b((?:arkvory|process|nodejs)_[a-z0-9_]+)\b/g)].map((m) => m[1]!);
}

/** The families a `/metrics` text declares (`# TYPE name type`), with each histogram's series names. */
function exported(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(m[1]!);
    if (m[2] === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(`${m[1]}${s}`);
  }
  return names;
}

async function dashboardExpressions(): Promise<string[]> {
  const doc = JSON.parse(await readFile(DASHBOARD, 'utf8')) as { panels: Panel[]; templating: { list: unknown[] } };
  const flat = (panels: Panel[]): Panel[] => panels.flatMap((p) => [p, ...flat(p.panels ?? [])]);
  const exprs = flat(doc.panels).flatMap((p) => (p.targets ?? []).map((t) => t.expr));
  return [...exprs, JSON.stringify(doc.templating)];
}

describe('the Grafana dashboard', () => {
  it('names only metrics a running writer or router exports', async () => {
    const scraped = new Set([
      ...exported(await (await fetch(`${writer.url}/metrics`)).text()),
      ...exported(await (await fetch(`http://127.0.0.1:${routerMetricsPort}/metrics`)).text()),
    ]);
    const named = new Set((await dashboardExpressions()).flatMap(metricNames));
    expect(named.size).toBeGreaterThan(40);
    expect([...named].filter((n) => !scraped.has(n))).toEqual([]);
  });

  it('has a panel for every gateway and router family of docs/metrics.md', async () => {
    const doc = await readFile(path.join(ROOT, 'docs', 'metrics.md'), 'utf8');
    const start = doc.indexOf('## Gateway metrics');
    const families = [...doc.slice(start, doc.indexOf('## Process metrics')).matchAll(/^\| `(arkvory_[a-z0-9_]+)`/gm)]
      .concat([...doc.slice(doc.indexOf('## Router metrics')).matchAll(/^\| `(arkvory_[a-z0-9_]+)`/gm)])
      .map((m) => m[1]!);
    expect(families.length).toBeGreaterThan(40);
    const named = new Set(
      (await dashboardExpressions()).flatMap(metricNames).map((n) => n.replace(/_(bucket|sum|count)$/, '')),
    );
    expect(families.filter((f) => !named.has(f))).toEqual([]);
  });
});
