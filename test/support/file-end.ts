/**
 * What a support module owes the test file that used it when the file ends (processes it started,
 * temporary directories, database roles) or when one of its tests ends: registered once, when the
 * module is evaluated, and run for every file by the setup file `per-file-hooks.ts`. Not `afterAll`
 * at a module's top level: the integration projects share their worker's module graph across files
 * (vitest `isolate: false`), so a module is evaluated once per worker, and a hook it registered
 * then would end only the first file that imported it. Each clean-up finds nothing to do in a file
 * that did not use its module.
 */
type CleanUp = () => Promise<void> | void;

const fileEnds: CleanUp[] = [];
const testEnds: CleanUp[] = [];

/** `cleanUp` runs once each test file's own `afterAll` hooks ran. */
export function onFileEnd(cleanUp: CleanUp): void {
  fileEnds.push(cleanUp);
}

/** `cleanUp` runs once each test's own `afterEach` hooks ran. */
export function onTestEnd(cleanUp: CleanUp): void {
  testEnds.push(cleanUp);
}

export function runFileEnds(): Promise<void> {
  return runAll(fileEnds);
}

export function runTestEnds(): Promise<void> {
  return runAll(testEnds);
}

/**
 * Last registered first, as vitest runs hooks (a module imported later may use one imported
 * earlier); every one runs, and the first failure is thrown once all have.
 */
async function runAll(cleanUps: readonly CleanUp[]): Promise<void> {
  let failure: { error: unknown } | undefined;
  for (let i = cleanUps.length - 1; i >= 0; i--) {
    try {
      await cleanUps[i]!();
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure) throw failure.error;
}
