/**
 * The real server's error catalogue (`api.go`): `{"error": "...", "status": N}` bodies with these
 * messages and statuses.
 */

export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export const API_ERRORS = {
  proxyNotFound: () => new ApiError(404, 'proxy not found'),
  proxyAlreadyExists: () => new ApiError(409, 'proxy already exists'),
  toxicNotFound: () => new ApiError(404, 'toxic not found'),
  toxicAlreadyExists: () => new ApiError(409, 'toxic already exists'),
  invalidToxicType: () => new ApiError(400, 'invalid toxic type'),
  invalidStream: () => new ApiError(400, 'stream was invalid, can be either upstream or downstream'),
  missingField: (field: string) => new ApiError(400, `missing required field: ${field}`),
  badRequestBody: (detail: string) => new ApiError(400, `bad request body: ${detail}`),
} as const;
