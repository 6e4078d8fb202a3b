export { AdmissionQueue } from './admission-queue.ts';
export type {
  AdmissionCounters,
  AdmissionQueueOptions,
  AdmissionSnapshot,
  Release,
  TransferKind,
} from './admission-queue.ts';
