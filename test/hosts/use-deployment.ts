/** The vitest layer over startDeployment: one deployment per test file, stopped when the file ends. */
import { afterAll, beforeAll } from 'vitest';
import { startDeployment, type Deployment } from './deployment.ts';

/** Its fields are set in beforeAll; a start takes long on a loaded machine (150 s allowed). */
export function useDeployment(options: Parameters<typeof startDeployment>[0]): Deployment {
  const holder = {} as Deployment;
  let started: Deployment | undefined;
  beforeAll(async () => {
    started = await startDeployment(options);
    Object.assign(holder, started);
  }, 150_000);
  afterAll(async () => {
    await started?.stop();
  });
  return holder;
}
