/** The environment of one gateway of the shared profile: a writer or a reader holding a slot of a shared download budget. */
export interface SharedProfile {
  readonly databaseUrl: string;
  /** A Redis URL, or one with a key prefix that keeps a test file's keys apart from the others'. */
  readonly redis: string | { readonly url: string; readonly prefix: string };
  readonly slots: number;
  readonly downloadBytesPerSecond: number;
}

export interface SharedProfileEnvOptions extends SharedProfile {
  readonly role: 'api' | 'reader';
  readonly slot: number;
  /** A fixed port, also advertised to the other gateways (the console's forwarding needs it). */
  readonly port?: number;
}

export function sharedProfileEnv(options: SharedProfileEnvOptions): Record<string, string> {
  const { port, redis } = options;
  return {
    ARKVORY_DATABASE_URL: options.databaseUrl,
    ...(typeof redis === 'string'
      ? { ARKVORY_REDIS_URL: redis }
      : { ARKVORY_REDIS_URL: redis.url, ARKVORY_REDIS_KEY_PREFIX: redis.prefix }),
    ARKVORY_ROLE: options.role,
    ARKVORY_GATEWAY_SLOTS: String(options.slots),
    ARKVORY_GATEWAY_SLOT: String(options.slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(options.downloadBytesPerSecond),
    ...(port === undefined ? {} : { ARKVORY_PORT: String(port), ARKVORY_ADVERTISE_URL: `http://127.0.0.1:${port}` }),
  };
}
