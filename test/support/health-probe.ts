import type http from 'node:http';

/**
 * For an HTTP server standing in for a gateway behind a router in a test: answers the router's
 * health probe as a serving gateway does, and says whether it did (the caller handles the rest).
 */
export function answerHealthProbe(req: http.IncomingMessage, res: http.ServerResponse): boolean {
  if (req.url !== '/health/status') return false;
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"serving"}');
  return true;
}
