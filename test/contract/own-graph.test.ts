/**
 * A test file that mocks a module runs with a module graph of its own. The unit and integration
 * projects share one graph per worker (`isolate: false`, vitest.config.ts): a `vi.mock` there would
 * replace the module for the files the worker runs after it, or find it loaded unmocked by the
 * files before. test/support/own-graph.ts lists the files that mock; the `own-graph` project runs
 * them, each isolated.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/paths.ts';
import { OWN_GRAPH } from '../support/own-graph.ts';

/** A call that mocks a module for the file (hoisted or not); spies on an object are the file's own. */
const MOCKS = /\bvi\s*\.\s*(?:mock|doMock)\s*\(/;
const SELF = 'test/contract/own-graph.test.ts';

function testFiles(): string[] {
  return execFileSync('git', ['ls-files', '-co', '--exclude-standard', '*.test.ts'], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
  })
    .split('\n')
    .filter((file) => file !== '' && file !== SELF);
}

describe('test files that mock a module', () => {
  it('are exactly those test/support/own-graph.ts lists, which the own-graph project runs apart', () => {
    const mocking = testFiles().filter((file) => MOCKS.test(readFileSync(path.join(REPO_ROOT, file), 'utf8')));
    expect(mocking.sort(), 'add a file that mocks to OWN_GRAPH, remove one that no longer does').toEqual(
      [...OWN_GRAPH].sort(),
    );
  });

  it('the pattern finds a mock however it is written', () => {
    for (const call of ["vi.mock('node:crypto')", 'vi.doMock(path, factory)', 'vi\n  .mock("x")'])
      expect(MOCKS.test(call), call).toBe(true);
    for (const call of ['vi.spyOn(object, "m")', 'vi.mocked(fn)', 'vi.unmock("x")'])
      expect(MOCKS.test(call), call).toBe(false);
  });
});
