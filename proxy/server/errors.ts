/**
 * Stable codes raised by proxy/: the HTTP edge (gateway and router) and the process around it
 * (configuration, start checks, command arguments).
 */
import {
  type CodeOf,
  CodedError,
  type CodedErrorOptions,
  defineErrors,
  mergeCatalogues,
} from '../../lib/coded-error.ts';
import { COMMON_ERRORS } from '../../lib/common-errors.ts';

export const GATEWAY_ERRORS = defineErrors('proxy/server/errors.ts', {
  method_not_allowed: {
    status: 405,
    message: 'Method not allowed on this route.',
    advice: 'Use a method listed in `Allow`.',
  },
  connect_refused: {
    status: 405,
    message: 'CONNECT is not served: this is no forward proxy.',
    advice:
      'Send the request itself to the gateway (or the router); a tunnel through CONNECT needs a forward proxy, which this is not.',
  },
  expectation_failed: {
    status: 417,
    message: 'The request carries an Expect this server does not meet; only 100-continue is.',
    advice: 'Send the request without `Expect`, or with `Expect: 100-continue`.',
  },
  malformed_request: {
    status: 400,
    message:
      'The request head breaks a rule a proxy must enforce (a second Host, an invalid header value); it was not forwarded.',
    advice:
      'Fix the client: send one Host and one Content-Length, header values without control characters, a target starting with `/`.',
  },
  tls_required: {
    status: 403,
    message: 'Credentials are refused over plain HTTP here; use https.',
    advice:
      'The gateway refuses credentials over plain HTTP (ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS): use its https:// URL, and replace a key that crossed the network in clear.',
  },
  cross_site_request: {
    status: 403,
    message:
      'A browser sent this request from another site; changes are only taken from this origin or from clients outside browsers.',
    advice:
      'Send the request from the console or a client outside a browser (curl, a CI job). A page of another site made the browser send it, with whatever credentials the browser holds for this gateway.',
  },
  duplicate_authorization: {
    status: 400,
    message: 'The request carries more than one Authorization header; send exactly one.',
    advice: 'Send one `Authorization` header; a proxy or client that adds a second must be fixed.',
  },
  read_only: {
    status: 405,
    message: 'This gateway is read-only; send writes to the writer.',
    advice: 'Send writes to the writer (slot 0), e.g. through the router.',
  },
  unsupported_content_encoding: {
    status: 415,
    message:
      'The upload has a content coding (Content-Encoding); artifacts are published as the bytes sent, so an encoded body would be served as its encoded bytes.',
    advice:
      'Send the body without `Content-Encoding` (`Accept-Encoding: identity` in the answer): decode it first, or publish the compressed file itself as the artifact, without the header.',
  },
  request_timeout: {
    status: 408,
    message: 'The request (its head, or its body) stopped arriving past its timeout.',
    advice:
      'The client sent no byte for `ARKVORY_HEADER_TIMEOUT_SECONDS` (head) or `ARKVORY_BODY_TIMEOUT_SECONDS` (body); check the client and network, then send again.',
  },
  internal: {
    status: 500,
    message: 'Internal error.',
    advice: 'A bug or an unexpected failure; the log line with the same `x-request-id` says more.',
  },
  gateway_unreachable: {
    status: 502,
    message: 'The router could not reach a gateway, or the gateway failed before it answered.',
    advice:
      'Router only: check the gateways (`/health/status` of each, their logs); the router retries a GET/HEAD once on another gateway.',
  },
  gateway_timeout: {
    status: 504,
    message: 'The gateway the router chose did not answer in time.',
    advice:
      'Router only: the gateway was silent past `ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS`; check its log for the same `x-request-id`, or raise that timeout.',
  },
  invalid_config: {
    status: null,
    message: 'The configuration is invalid.',
    advice: 'Each line names an `ARKVORY_*` variable and what it expects; fix them all and start again.',
  },
  port_in_use: {
    status: null,
    message: 'The port cannot be bound.',
    advice: 'Stop the process that listens there, or choose another port; nothing was created.',
  },
  cache_dir_in_use: {
    status: null,
    message: 'Another gateway instance holds the slice cache directory (`ARKVORY_CACHE_DIR`).',
    advice:
      'Give each gateway instance its own `ARKVORY_CACHE_DIR` (the message names the process holding this one); nothing in the directory was touched. The workers of one instance share it through their coordinating process; when the message names workers whose coordinating process is gone, start again once they have exited.',
  },
  cache_dir_not_a_cache: {
    status: null,
    message: 'The slice cache directory (`ARKVORY_CACHE_DIR`) holds other things and nothing of a slice cache.',
    advice:
      'Point `ARKVORY_CACHE_DIR` at an empty directory (or a filesystem holding only `lost+found`) or an existing cache of this gateway: a cache empties its `tmp/` and removes the parts of its directory it does not use at start. Nothing in the directory was touched.',
  },
  redis_unreachable: {
    status: null,
    message: 'Redis (`ARKVORY_REDIS_URL`) did not answer.',
    advice:
      'Start Redis or fix `ARKVORY_REDIS_URL` (`arkvory doctor` checks it); a backup or restore reads or writes the published rule documents there, and `arkvory ratelimit publish|unpublish|show` works on them there. The CLI exits 1.',
  },
  embedded_database_lost: {
    status: null,
    message: 'The embedded PostgreSQL exited on its own (killed or crashed) while the gateway ran.',
    advice:
      "The gateway stopped (exit 1) and made no connection meanwhile (the port it left could be any local account's); start it again, and see why the server died (the OOM killer: `journalctl -k`).",
  },
  coordinator_unanswered: {
    status: null,
    message:
      'A starting worker of an instance (`ARKVORY_WORKERS`) got no answer from its coordinating process in time.',
    advice:
      "The worker exits 1: at the instance's start the instance stops with it, later its coordinating process starts another once it runs again. See why the coordinating process stood still (stopped with SIGSTOP, swapped out, a long synchronous task; its pid is the worker's parent's).",
  },
  data_dir_unusable: {
    status: null,
    message: 'The data directory cannot be created or written.',
    advice: 'Fix the permissions or the path of `ARKVORY_DATA_DIR`; nothing was created.',
  },
  database_unreachable: {
    status: null,
    message: 'The database did not answer an admin command.',
    advice:
      'Start the gateway (`npm start`, for its embedded database) or fix `ARKVORY_DATABASE_URL` (`arkvory doctor` checks it); the command exits 1.',
  },
  schema_behind: {
    status: null,
    message: 'The database schema is behind this code.',
    advice: 'Run `arkvory migrate` with the same `ARKVORY_DATABASE_URL`, then the command again; it exits 1.',
  },
  usage: {
    status: null,
    message: 'The command line is not valid.',
    advice: 'Read `arkvory <command> --help`; the CLI exits 2.',
  },
  io: {
    status: null,
    message: 'A local file the command names cannot be read or written.',
    advice:
      'The message names the file and the system error (ENOENT, EACCES); fix the path or its permissions. The CLI exits 1.',
  },
  database_permission: {
    status: null,
    message: 'The database login lacks a privilege this command needs.',
    advice:
      'Run the command with the login of the role it belongs to: admin commands (`principals`, `keys`, `grants`, `repos`, `quota`, `cache`) use the writer\'s (docs/deploy.md, "Least privilege"). The CLI exits 1.',
  },
  audit_not_recorded: {
    status: null,
    message: 'The change was made, but its audit entry was not recorded.',
    advice:
      'The change stands (its result is on stdout); the message says why the insert failed (the database gone, the login without INSERT on `arkvory_audit_events`). Fix that and record the change by other means if the trail must hold it. The CLI exits 3 (not 1), so a script tells work done from work that failed and does not do it again (README, "CLI").',
  },
});

/** What proxy/ may raise: its own codes and the common ones. */
const RAISED = mergeCatalogues('proxy', COMMON_ERRORS, GATEWAY_ERRORS);

export type GatewayErrorCode = CodeOf<typeof RAISED>;

export class GatewayError extends CodedError<GatewayErrorCode> {
  override readonly name: string = 'GatewayError';
  constructor(code: GatewayErrorCode, message?: string, options?: CodedErrorOptions) {
    super(RAISED, code, message, options);
  }
}

/** A request head that did not arrive within the header timeout (Node reports it as a client error). */
export const HEAD_TIMEOUT = new GatewayError('request_timeout', 'The request head did not arrive in time.');
/** A request line or header Node's parser refused. */
export const MALFORMED_REQUEST = new GatewayError('invalid_request', 'Malformed HTTP request.');
/** A request body with no byte for the body timeout: the upload is dropped and the connection closed. */
export const BODY_TIMEOUT = new GatewayError(
  'request_timeout',
  'No request body byte arrived in time; the upload was dropped.',
);
/** A connection past the front door's bound. */
export const OVERLOADED = new GatewayError('unavailable', 'Too many open connections; retry shortly.', {
  headers: { 'retry-after': '1' },
});
/** A request that arrives while the process drains. */
export const DRAINING = new GatewayError('unavailable', 'This process is shutting down; retry (on another gateway).', {
  headers: { 'retry-after': '1' },
});
