/**
 * The codes every layer may raise (policy/ and storage-adapter/ cannot import each other, so a code
 * both raise is declared here, once). The raise site's message says what in particular happened.
 */
import { defineErrors } from './coded-error.ts';

export const COMMON_ERRORS = defineErrors('lib/common-errors.ts', {
  invalid_request: {
    status: 400,
    message: 'The request is malformed or does not match what it declared.',
    advice: 'Fix the request (header, body or digest) and send it again.',
  },
  not_found: {
    status: 404,
    message: 'Not found.',
    advice: 'Check the path; a repository you cannot read also answers 404.',
  },
  conflict: {
    status: 409,
    message: 'The request conflicts with the current state.',
    advice: 'Different bytes are already published under this name (or the state changed); use a new name or version.',
  },
  payload_too_large: {
    status: 413,
    message: 'The request body is larger than allowed.',
    advice: 'Send less than `ARKVORY_MAX_UPLOAD_BYTES`, or use a multipart upload.',
  },
  unavailable: {
    status: 503,
    message: 'This process cannot serve right now (starting, draining, or a dependency is down); retry later.',
    advice: 'The gateway is starting, draining or a dependency is down; retry or use another gateway.',
  },
  startup_refused: {
    status: null,
    message: 'This process refused to start.',
    advice:
      'The rest of the line says why and what to change (a stored shared-download policy, a busy slot, the schema); fix that and start again.',
  },
});
