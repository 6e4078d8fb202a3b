/**
 * The test harness: what tests, benchmarks, chaos scenarios and the multi-host suite share to start
 * processes, find ports, seed a database and wait. It registers no test-runner hooks (test/support
 * adds vitest's on top), so plain scripts under bench/ import it too.
 */
export { freeLoopbackPort, PORT_CLAIMS_VARIABLE } from './ports.ts';
export { createDatabase, createMigratedTemplate, openPool, type ScratchDatabase } from './database.ts';
export {
  runCli,
  spawnGateway,
  startGateway,
  waitForHealth,
  waitForSliceFills,
  waitForStoreOk,
  withLeaseLines,
  START_TIMEOUT_MS,
  type GatewayOptions,
  type GatewayProcess,
  type StartedWhen,
} from './gateway.ts';
export {
  exitedWithOutput,
  processEnv,
  startProcess,
  STOP_GRACE_MS,
  type ManagedProcess,
} from './managed-process.ts';
export { ARKVORY_BIN, REPO_ROOT } from './paths.ts';
export { readsByPrincipal, writeRateLimitsFile } from './rate-limits-file.ts';
export { postgresSettings } from './postgres-settings.ts';
export {
  JAEGER_INSTALL_HINT,
  startJaeger,
  type JaegerServer,
  type JaegerSpan,
  type JaegerTrace,
  type TraceWithOptions,
} from './jaeger.ts';
export { type NginxLogLevel, nginxMainConfig, type NginxMainConfigOptions, writeNginxConf } from './nginx-config.ts';
export { pingRedis, REDIS_INSTALL_HINT, startRedisServer, type RedisServer } from './redis.ts';
export { runProcess, type ProcessResult } from './run-process.ts';
export { bearer, createRepository, createServiceAccount, seedWriters, type ServiceAccount } from './seed.ts';
export { samplePeak } from './sample-peak.ts';
export { type SharedProfile, sharedProfileEnv, type SharedProfileEnvOptions } from './shared-profile-env.ts';
export { makeTempDir } from './temp-dir.ts';
export { roomInWindow, waitForHttp, waitUntil, type WaitOptions, type WatchedProcess } from './wait.ts';
export {
  type CertificateAuthority,
  createCertificateAuthority,
  createIntermediateAuthority,
  type IssuedCertificate,
  type IssueOptions,
  issueCertificate,
  issueClientAuthority,
  issueClientCertificate,
  issueServerCertificate,
  replaceFileAtomically,
} from './tls-certs.ts';
export { startTlsPostgres, type TlsPostgres } from './tls-postgres.ts';
