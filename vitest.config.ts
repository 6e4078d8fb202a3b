import os from 'node:os';
import path from 'node:path';
import { defineConfig } from 'vitest/config';
import { LongFilesFirst } from './test/support/long-files-first.ts';
import { OWN_GRAPH } from './test/support/own-graph.ts';

// The tools scripts/test-tools.sh installs (toxiproxy-server, weed, minio, schemathesis) are found on
// PATH by the suites and every process they spawn, however vitest was started.
const TOOLS_BIN = path.join(process.env.ARKVORY_TOOLS_DIR ?? '/root/.cache/arkvory-tools', 'bin');
if (!(process.env.PATH ?? '').split(path.delimiter).includes(TOOLS_BIN))
  process.env.PATH = [TOOLS_BIN, process.env.PATH].filter(Boolean).join(path.delimiter);

// Node's compile cache for every process the suites start (gateways, CLI runs, the vitest workers):
// a start then reads modules compiled by an earlier one instead of stripping and compiling each
// again, about half of a gateway's or CLI run's start-up CPU. Node checks each entry against the
// source, so an edited file is compiled afresh.
process.env.NODE_COMPILE_CACHE ??= path.join(os.tmpdir(), 'arkvory-node-compile-cache');

/** Clean-ups support modules owe each file, where files share a module graph (test/support/file-end.ts). */
const PER_FILE_HOOKS = 'test/support/per-file-hooks.ts';

// The mutation suite's sandbox (.stryker-tmp/, stryker.config.mjs) is a copy of the tree, tests
// included: every project excludes it.
// One global setup provides a real PostgreSQL and Redis to every project (see test/support).
export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 4,
    // The files that take minutes start first, on a fresh clone too (test/support/long-files-first.ts).
    sequence: { sequencer: LongFilesFirst },
    testTimeout: 60_000,
    hookTimeout: 90_000,
    teardownTimeout: 30_000,
    reporters: ['default', ['json', { outputFile: '.vitest-report.json' }]],
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          isolate: false,
          include: ['{lib,proxy,policy,storage-adapter,migrations,client}/**/*.test.ts'],
          exclude: ['**/*.int.test.ts', '**/node_modules/**', '**/.stryker-tmp/**', ...OWN_GRAPH],
        },
      },
      // The integration files share their worker's module graph too: a fresh one per file cost
      // each file a process and its imports again (docs/testing.md). What a support module must
      // undo after each file runs from the setup file (test/support/file-end.ts).
      {
        extends: true,
        test: {
          name: 'int',
          isolate: false,
          setupFiles: [PER_FILE_HOOKS],
          include: ['**/*.int.test.ts', 'test/contract/**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/.stryker-tmp/**', ...OWN_GRAPH],
        },
      },
      // Files that mock a module: a graph of their own, the mock never reaches another file.
      {
        extends: true,
        test: {
          name: 'own-graph',
          include: [...OWN_GRAPH],
        },
      },
      {
        extends: true,
        test: {
          name: 'chaos',
          isolate: false,
          setupFiles: [PER_FILE_HOOKS],
          include: ['chaos/**/*.chaos.test.ts'],
          exclude: ['**/node_modules/**', '**/.stryker-tmp/**'],
        },
      },
      // Several hosts in network namespaces (root only: it fails saying so otherwise); each file on
      // its own network (test/hosts/netns.ts), so they run beside the other suites.
      {
        extends: true,
        test: {
          name: 'hosts',
          isolate: false,
          setupFiles: [PER_FILE_HOOKS],
          include: ['test/hosts/**/*.hosts.test.ts'],
          exclude: ['**/node_modules/**', '**/.stryker-tmp/**'],
        },
      },
      // The container image (deploy/container/build.sh) run from its unpacked root in mount and PID
      // namespaces (root only: it fails saying so otherwise); its build is cached by its inputs and
      // taken under a lock, so its files run beside the others.
      {
        extends: true,
        test: {
          name: 'image',
          include: ['test/image/**/*.image.test.ts'],
          exclude: ['**/node_modules/**'],
        },
      },
    ],
  },
});
