/**
 * The environment variables the client commands (`arkvory get`, `put`, `presign`) read. They belong
 * to the client's shell, beside any server variables: the server's configuration check ignores
 * exactly these names (proxy/config), so one shell can run both kinds of command.
 */
export const CLIENT_VARIABLES = {
  /** The gateway or router the client talks to (what `--url` overrides). */
  url: 'ARKVORY_URL',
  /** The API key itself. */
  key: 'ARKVORY_KEY',
  /** A file holding the API key (what `--key-file` overrides); read before ARKVORY_KEY. */
  keyFile: 'ARKVORY_KEY_FILE',
  /** Where `put` remembers unfinished multipart sessions (default `~/.cache/arkvory/uploads`). */
  uploadStateDir: 'ARKVORY_UPLOAD_STATE_DIR',
} as const;

/** Every name in CLIENT_VARIABLES. */
export const CLIENT_VARIABLE_NAMES: readonly string[] = Object.values(CLIENT_VARIABLES);
