import { defineCommand, form, type Command } from './command.ts';

export const serveCommand: Command = defineCommand({
  name: 'serve',
  summary: 'run the gateway in the role named by ARKVORY_ROLE',
  description: `Runs the process in the role given by ARKVORY_ROLE (api, reader, worker, router, rules-service), configured only by
ARKVORY_* environment variables (see the README table). With no ARKVORY_DATABASE_URL it starts an
embedded PostgreSQL under <ARKVORY_DATA_DIR>/.pg and applies the migrations itself.

SIGTERM/SIGINT: stop accepting, /health/status turns 503, in-flight requests get up to
ARKVORY_SHUTDOWN_TIMEOUT_SECONDS, then exit 0. A second signal exits at once.
SIGHUP: read the …_FILE secrets again (database URL/password, S3 key, rules-service and metrics
tokens; new connections and requests use a new value once its server accepts it) and the TLS
certificate; see docs/deploy.md, "Rotation runbook".
Exit codes: 0 clean stop, 1 startup or runtime failure, 2 invalid configuration.`,
  forms: [form({ run: async (_input, env) => (await import('../server/serve.ts')).serve(env) })],
});
