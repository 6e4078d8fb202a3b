/** The environment of one gateway of the shared profile: a writer or a reader holding a slot of a shared download budget. */
export interface SharedProfileEnvOptions {
  readonly role: 'api' | 'reader';
  readonly databaseUrl: string;
  readonly redisUrl: string;
  /** Keeps a test file's Redis keys apart from the others'. */
  readonly redisKeyPrefix?: string;
  readonly slots: number;
  readonly slot: number;
  readonly downloadBytesPerSecond: number;
  /** A fixed port, also advertised to the other gateways (the console's forwarding needs it). */
  readonly port?: number;
}

export function sharedProfileEnv(options: SharedProfileEnvOptions): Record<string, string> {
  const { port, redisKeyPrefix } = options;
  return {
    ARKVORY_DATABASE_URL: options.databaseUrl,
    ARKVORY_REDIS_URL: options.redisUrl,
    ...(redisKeyPrefix === undefined ? {} : { ARKVORY_REDIS_KEY_PREFIX: redisKeyPrefix }),
    ARKVORY_ROLE: options.role,
    ARKVORY_GATEWAY_SLOTS: String(options.slots),
    ARKVORY_GATEWAY_SLOT: String(options.slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(options.downloadBytesPerSecond),
    ...(port === undefined ? {} : { ARKVORY_PORT: String(port), ARKVORY_ADVERTISE_URL: `http://127.0.0.1:${port}` }),
  };
}
