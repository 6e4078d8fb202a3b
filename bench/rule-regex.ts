/**
 * Cost of one rule-regex match: RE2JS (what the gateway runs, linear time) against V8's built-in
 * backtracking RegExp (the baseline it replaced), on patterns and values like the shipped rules and
 * the identifiers a request carries. Interleaved rounds, medians, ratio to the baseline in the same
 * run. The catastrophic pattern is run on RE2JS only (the baseline would not return).
 *
 *   node bench/rule-regex.ts [--rounds 7] [--iterations 20000]
 */
import { parseArgs } from 'node:util';
import { regexMatches } from '../policy/rate-limit/rule-regex.ts';
import { median } from './support.ts';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '7' }, iterations: { type: 'string', default: '20000' } },
});
const rounds = Number(values.rounds);
const iterations = Number(values.iterations);

const CASES: Array<{ name: string; pattern: string; value: string; baseline: boolean; iterations?: number }> = [
  { name: 'principal ^[^<]', pattern: '^[^<]', value: '3f0c2a4e-8b1d-4c5e-9f7a-1b2c3d4e5f60', baseline: true },
  {
    name: 'route prefix',
    pattern: '^/api/v1/repositories/',
    value: '/api/v1/repositories/:repo/packages/:name/:version/assets/:asset/content',
    baseline: true,
  },
  {
    name: 'repository alternation',
    pattern: '^(release|nightly)-[a-z0-9]+$',
    value: 'nightly-x86_64-linux-gnu-2026',
    baseline: true,
  },
  // The published rule: on a content route template the backtracking engine takes tens of ms.
  {
    name: '.*.*.*.*.*X on a route template',
    pattern: '.*.*.*.*.*X',
    value: '/api/v1/repositories/:repo/packages/:name/:version/assets/:asset/content',
    baseline: true,
    iterations: 10,
  },
  { name: '(.*.*)*X on 64 chars', pattern: '(.*.*)*X', value: 'a'.repeat(64), baseline: false },
];

function nsPerMatch(fn: (v: string) => boolean, value: string, count = iterations): number {
  let hits = 0;
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) if (fn(value)) hits++;
  const ns = Number(process.hrtime.bigint() - start) / count;
  if (hits < 0) throw new Error('unreachable');
  return ns;
}

console.log(`rule-regex bench: ${rounds} interleaved rounds × ${iterations} matches, node ${process.version}`);
console.log('case | re2js ns/match (median) | RegExp ns/match (median) | ratio re2js/RegExp');
for (const c of CASES) {
  const native = new RegExp(c.pattern, 'u');
  const re2: number[] = [];
  const base: number[] = [];
  regexMatches(c.pattern, c.value); // compile once, as the gateway's cache does
  for (let r = 0; r < rounds; r++) {
    re2.push(nsPerMatch((v) => regexMatches(c.pattern, v), c.value, c.iterations));
    if (c.baseline) base.push(nsPerMatch((v) => native.test(v), c.value, c.iterations));
  }
  const a = median(re2);
  const b = c.baseline ? median(base) : NaN;
  console.log(
    `${c.name} | ${a.toFixed(0)} | ${c.baseline ? b.toFixed(0) : 'not run (backtracks)'} | ${c.baseline ? (a / b).toPrecision(2) : '-'}`,
  );
}
