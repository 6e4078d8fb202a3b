export { bearer, createRepository, createServiceAccount } from '../harness/index.ts';
