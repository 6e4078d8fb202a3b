/**
 * The Arkvory client SDK: resuming downloads, multipart-resuming uploads and pre-signed links, with
 * an AbortSignal on each call and errors carrying the gateway's stable codes. Depends on undici only.
 */
export { download, type DownloadFiles, type DownloadOptions, type DownloadResult } from './download.ts';
export { upload, contentDigestHeader, type UploadOptions, type UploadResult } from './upload.ts';
export { presign, type PresignedLink } from './presign.ts';
export { ArkvoryClientError, CLIENT_ERRORS, type ClientErrorCode } from './errors.ts';
export { KeyScope, normalizedOrigin } from './credential-scope.ts';
export { baseUrlOf, contentUrl, parseShortTarget, targetOf, type Target } from './target.ts';
export { progressBar, progressJson, type Progress } from './progress.ts';
export { CLIENT_VARIABLE_NAMES, CLIENT_VARIABLES } from './environment.ts';
