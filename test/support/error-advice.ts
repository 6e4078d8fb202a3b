import type { ErrorCode } from '../../proxy/server/http-errors.ts';

/** What an operator or client should do about each code; rendered into the README table. */
export const ERROR_ADVICE: Record<ErrorCode, string> = {
  invalid_request: 'Fix the request (header, body or digest) and send it again.',
  unauthorized: 'Send `Authorization: Bearer ark_<keyId>_<secret>` with a live key.',
  forbidden: 'Ask an admin for the grant or scope the call needs.',
  not_found: 'Check the path; a repository you cannot read also answers 404.',
  method_not_allowed: 'Use a method listed in `Allow`.',
  read_only: 'Send writes to the writer (slot 0), e.g. through the router.',
  tls_required:
    'The gateway refuses credentials over plain HTTP (ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS): use its https:// URL, and replace a key that crossed the network in clear.',
  conflict: 'Different bytes are already published under this name; use a new name or version.',
  request_timeout:
    'The client sent no body byte for `ARKVORY_BODY_TIMEOUT_SECONDS`; check the client and network, then upload again.',
  payload_too_large: 'Send less than `ARKVORY_MAX_UPLOAD_BYTES`, or use a multipart upload.',
  range_not_satisfiable: 'Ask for ranges inside `Content-Range: bytes */<size>`.',
  rate_limited: 'Wait `Retry-After` seconds; see the RateLimit headers.',
  busy: 'Too many transfers for this principal; wait `Retry-After` seconds.',
  internal: 'A bug or an unexpected failure; the log line with the same `x-request-id` says more.',
  upstream_unreachable: 'Check that the artifact store is up and reachable from the gateway.',
  unavailable: 'The gateway is starting, draining or a dependency is down; retry or use another gateway.',
  lease_lost: 'This gateway lost its lease and is fenced; restart it (clients retry with Range).',
  storage_mismatch: 'The storage root and the database disagree; mount the right root or database.',
  upstream_timeout: 'The artifact store is slow; check it, or raise the upstream timeouts.',
  storage_full: 'Free disk space on the storage; nothing partial was published.',
  upload_expired: 'Start a new upload session; the parts of an expired one are removed.',
  part_missing: 'Upload every listed part (PUT …/parts/{n}) before completing.',
  part_mismatch: 'Re-send the part, or list the sha256 the part was received with.',
  parts_out_of_order: 'List each part once, in ascending part number.',
};
