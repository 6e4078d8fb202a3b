/**
 * Summarises V8 `.cpuprofile` files (from `--cpu-prof`): self time by function and by file, top N.
 *
 *   node bench/cpu-profile-summary.ts FILE.cpuprofile [--top 25]
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '25' } },
});
const top = Number(values.top);
for (const file of positionals) {
  const profile = JSON.parse(await readFile(file, 'utf8')) as {
    nodes: Node[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const byFunction = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    const url =
      n.callFrame.url.replace(/^file:\/\/\/work\/(main|wt-[a-z0-9]+)\//, '').replace(/^node:/, 'node:') || '(native)';
    const fn = `${n.callFrame.functionName || '(anonymous)'} ${url}:${n.callFrame.lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + us);
    byFile.set(url, (byFile.get(url) ?? 0) + us);
    total += us;
  }
  const print = (title: string, m: Map<string, number>) => {
    console.log(`  ${title}`);
    for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top))
      console.log(`    ${(us / 1e6).toFixed(2).padStart(7)} s ${((100 * us) / total).toFixed(1).padStart(5)}%  ${k}`);
  };
  console.log(`${file}: ${(total / 1e6).toFixed(2)} s sampled`);
  print('self time by function', byFunction);
  print('self time by file', byFile);
}
