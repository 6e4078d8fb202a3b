/**
 * The import rules of docs/architecture.md ("Folders and their import rules"), checked against the
 * code: the table is read from the page itself, so the page and the check cannot drift apart. Every
 * relative import (static, `export … from`, and `import('…')` with a literal) of every tracked
 * TypeScript file is resolved; production files may import only what their folder's row allows,
 * a folder entered through `index.ts` is entered only there from outside, no production module
 * takes part in an import cycle, and every file path the page names exists.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/paths.ts';

interface FolderRule {
  /** `dir/` (the whole tree below) or `dir/*.ts` (the files directly in dir). */
  readonly pattern: string;
  readonly mayImport: readonly string[];
  /**
   * The modules through which the folder is entered from outside (`index.ts`, and perhaps a light
   * one whose importers must not load the whole folder); empty when any file may be imported.
   */
  readonly entries: readonly string[];
}

const ARCHITECTURE = path.join(REPO_ROOT, 'docs/architecture.md');

/** The rows of the table under the "Folders and their import rules" heading. */
export function readFolderRules(markdown: string): FolderRule[] {
  const section = markdown.split(/^## /m).find((part) => part.startsWith('Folders and their import rules'));
  if (!section) throw new Error('docs/architecture.md has no "## Folders and their import rules" section');
  const rules: FolderRule[] = [];
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    if (cells.length < 5 || !cells[1]?.startsWith('`')) continue;
    const codes = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
    const [pattern] = codes(cells[1]);
    if (!pattern) continue;
    rules.push({ pattern, mayImport: codes(cells[2] ?? ''), entries: codes(cells[3] ?? '') });
  }
  return rules;
}

function matches(pattern: string, file: string): boolean {
  if (pattern.endsWith('/*.ts')) {
    const dir = pattern.slice(0, -'*.ts'.length);
    return file.startsWith(dir) && file.endsWith('.ts') && !file.slice(dir.length).includes('/');
  }
  return file.startsWith(pattern);
}

/** The most specific row for a file: the longest pattern that matches it. */
function ruleOf(rules: readonly FolderRule[], file: string): FolderRule | undefined {
  let best: FolderRule | undefined;
  for (const rule of rules) {
    if (matches(rule.pattern, file) && (!best || rule.pattern.length > best.pattern.length)) best = rule;
  }
  return best;
}

const IMPORT = /(?:\bfrom\s+|\bimport\s*\(\s*|^import\s+)['"](\.{1,2}\/[^'"]+)['"]/gm;

function trackedTypeScript(): string[] {
  const out = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '*.ts'], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
  });
  return out.split('\n').filter((file) => file !== '' && existsSync(path.join(REPO_ROOT, file)));
}

function importsOf(file: string): string[] {
  const source = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  return [...source.matchAll(IMPORT)].map((m) =>
    path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1] as string)),
  );
}

const isProduction = (file: string) => !/\.test\.ts$/.test(file) && !/^(test|bench|chaos)\//.test(file);

/** Tarjan's strongly connected components of more than one file (or a file importing itself). */
export function cyclesOf(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (node: string) => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue;
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) as number, low.get(next) as number));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) as number, index.get(next) as number));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || (graph.get(node) ?? []).includes(node)) cycles.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return cycles;
}

describe('import rules (docs/architecture.md)', () => {
  const markdown = readFileSync(ARCHITECTURE, 'utf8');
  const rules = readFolderRules(markdown);
  const files = trackedTypeScript();

  it('reads a rule for every folder that holds production code', () => {
    expect(rules.length).toBeGreaterThan(10);
    const unruled = files.filter((file) => isProduction(file) && file.includes('/') && !ruleOf(rules, file));
    expect(unruled).toEqual([]);
  });

  it('should import only what its folder may: every relative import of production code', () => {
    const broken: string[] = [];
    for (const file of files.filter(isProduction)) {
      const own = ruleOf(rules, file);
      if (!own) continue;
      for (const target of importsOf(file)) {
        const theirs = ruleOf(rules, target);
        if (theirs === own) continue;
        if (!own.mayImport.some((pattern) => matches(pattern, target))) {
          broken.push(`${file} imports ${target}: ${own.pattern} may import ${own.mayImport.join(', ') || 'nothing'}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('should enter a folder with an entry module only through it, from production code and tests alike', () => {
    const broken: string[] = [];
    for (const file of files) {
      const own = ruleOf(rules, file);
      for (const target of importsOf(file)) {
        const theirs = ruleOf(rules, target);
        if (!theirs || theirs.entries.length === 0 || theirs === own) continue;
        const entries = theirs.entries.map((entry) => path.posix.join(theirs.pattern, entry));
        if (!entries.includes(target))
          broken.push(`${file} imports ${target}: enter ${theirs.pattern} through ${entries.join(' or ')}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('should have no import cycle among production modules (static and dynamic imports)', () => {
    const graph = new Map(files.filter(isProduction).map((file) => [file, importsOf(file)] as const));
    expect(cyclesOf(graph)).toEqual([]);
  });

  it('finds a planted cycle and a planted forbidden import (the checks can fail)', () => {
    const graph = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['a.ts']],
    ]);
    expect(cyclesOf(graph)).toEqual([['a.ts', 'b.ts', 'c.ts']]);
    const lib = ruleOf(rules, 'lib/transaction.ts');
    expect(lib?.mayImport.some((pattern) => matches(pattern, 'proxy/server/serve.ts'))).toBe(false);
    const s3 = ruleOf(rules, 'storage-adapter/s3/s3-store.ts');
    expect(s3?.entries).toEqual(['index.ts', 's3-location.ts']);
    expect(s3?.mayImport.some((pattern) => matches(pattern, 'storage-adapter/fs/fs-store.ts'))).toBe(false);
  });

  it('names only files and folders that exist', () => {
    const named = [
      ...markdown.matchAll(
        /`((?:lib|policy|proxy|storage-adapter|migrations|client|bin|test|bench|chaos|deploy|docs)\/[^`*\s]*)`/g,
      ),
    ];
    const missing = named.map((m) => m[1] as string).filter((name) => !existsSync(path.join(REPO_ROOT, name)));
    expect([...new Set(missing)]).toEqual([]);
  });
});
