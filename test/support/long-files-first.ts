/**
 * The order vitest starts test files in: those that take most of a minute or more first, longest
 * first, then the unit files, then vitest's own order.
 * Vitest starts the longest first only when it has timings from an earlier run on that checkout; a
 * fresh clone (CI) has none and goes by file size, which can leave a long file to start late and run
 * on alone (docs/testing.md).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * Longest first, as measured in full runs (`.vitest-report.json`, docs/testing.md): a long file
 * started late runs on while the other workers have nothing left, which made the last minutes of a
 * run busy on two of its four workers.
 */
const LONG_FILES = [
  'proxy/gates/transfers.int.test.ts',
  'test/contract/schemathesis.test.ts',
  'proxy/tls/tls.int.test.ts',
  'proxy/commands/restore-target.int.test.ts',
  'test/image/reproducible.image.test.ts',
  'proxy/commands/backup.int.test.ts',
  'proxy/content/slice-cache.int.test.ts',
  'proxy/gates/spec-bounds.int.test.ts',
  'proxy/server/http2.int.test.ts',
  'proxy/gates/shared-profile.int.test.ts',
  'proxy/commands/maintenance.int.test.ts',
  'proxy/rules-service/rules-service.int.test.ts',
  'proxy/content/slice-cache-instance-lock.int.test.ts',
  'proxy/multipart/multipart.int.test.ts',
  'proxy/server/front-door.int.test.ts',
  'test/hosts/reads-across-hosts.hosts.test.ts',
  'client/get.int.test.ts',
  'proxy/multipart/multipart-bounds.int.test.ts',
  'proxy/content/static-store.int.test.ts',
  'proxy/router/router-bans.int.test.ts',
  'proxy/content/storage-quota.int.test.ts',
  'proxy/workers/worker-lifecycle.int.test.ts',
  'chaos/s3-link.chaos.test.ts',
  'test/hosts/writer-faults.hosts.test.ts',
  'policy/lease/coordinator.int.test.ts',
  // Not long (20-26 s), but vitest's own order put it last in every run: the run's last 20 s.
  'test/conformance/artifact-store.int.test.ts',
];

// A renamed file would silently lose its place: fail the run instead.
for (const file of LONG_FILES)
  if (!existsSync(path.join(ROOT, file)))
    throw new Error(`test/support/long-files-first.ts names ${file}, which does not exist`);

export class LongFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    // Then the unit project's files, a few seconds of CPU in all, while every worker is busy: after
    // the integration files (vitest's order) they were the run's last 17 s, on one worker.
    const rank = (spec: TestSpecification): number => {
      const index = LONG_FILES.indexOf(path.relative(ROOT, spec.moduleId));
      if (index !== -1) return index;
      return spec.project.name === 'unit' ? LONG_FILES.length : LONG_FILES.length + 1;
    };
    // Array sort is stable: the other files keep vitest's order.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
