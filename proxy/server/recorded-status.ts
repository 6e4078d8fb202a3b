/**
 * The status a request is recorded with (its request line, `arkvory_http_requests_total`, its span).
 * Node's `statusCode` reads 200 until an answer sets it, so a response that closed before any head
 * was written (the client left while the request waited for a slot, a lock, a store) would count as
 * a success, and a download. It is recorded as 499 instead, nginx's "client closed request": no
 * answer was given. Once a head is written its status stands, whether or not the body finished
 * (`completed` says that). The same for HTTP/1.1 and HTTP/2 (a stream the client reset).
 */
export const CLIENT_CLOSED_REQUEST = 499;

export function recordedStatus(res: { readonly headersSent: boolean; readonly statusCode: number }): number {
  return res.headersSent ? res.statusCode : CLIENT_CLOSED_REQUEST;
}
