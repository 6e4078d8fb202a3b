/**
 * `node:http`, loaded as CommonJS. Imported as an ES module it costs about 80 ms of CPU at start in
 * Node 24 (`await import('node:http')` 80–88 ms against `require('node:http')` 8 ms): the module
 * namespace reads every export, and the WebSocket, CloseEvent and MessageEvent getters load Node's
 * bundled undici, which only a global `fetch` needs (the console's status page, doctor). Types still
 * come from `node:http` (`import type`).
 */
import { createRequire } from 'node:module';

const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');
export default http;
