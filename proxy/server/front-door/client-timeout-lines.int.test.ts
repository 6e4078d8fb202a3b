/**
 * The front door's lines about clients it timed out are bounded as every client fault's are
 * (lib/log-budget.ts CLIENT_FAULT_LOG: 5 a minute per phase at info, the rest at debug), while each
 * timeout is still counted. Anyone may open connections or HTTP/2 streams whose body never comes:
 * one info line per stalled request would let a client write as many lines as it opens streams.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import {
  type FrontDoorServer,
  openTestCertificate,
  startFrontDoorServer,
  type TestCertificate,
} from '../../../test/support/front-door-server.ts';
import { capturedLog } from '../../../test/support/captured-log.ts';
import { DEFAULT_FRONT_DOOR } from '../front-door.ts';

const STALLED = 8;
const LIMITS = { ...DEFAULT_FRONT_DOOR, bodyIdleTimeoutMs: 300, sendIdleTimeoutMs: 300, maxConnections: 50 };

const { log, lines } = capturedLog<{ level: number; code?: string; phase?: string; suppressed?: number }>('debug');
/** Reads the body to its end, then answers. */
const answer = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
  req.resume();
  req.on('end', () => res.end('ok'));
  req.on('error', () => {});
};

let certificate: TestCertificate;
let listening: FrontDoorServer | undefined;

beforeAll(async () => {
  certificate = await openTestCertificate();
});
afterAll(() => certificate.remove());
afterEach(async () => {
  await listening?.close();
  listening = undefined;
  lines.length = 0;
});

const timeoutLines = () => lines.filter((l) => l.code === 'client_timeout');
const INFO = 30;
const DEBUG = 20;

it(`${STALLED} HTTP/1.1 uploads whose body stalls: each answered 408 and counted, at most 5 info lines, the rest at debug`, async () => {
  listening = await startFrontDoorServer({ limits: LIMITS, log, answer });
  const port = listening.port;
  const answers = await Promise.all(
    Array.from(
      { length: STALLED },
      () =>
        new Promise<string>((resolve, reject) => {
          let text = '';
          const socket = net.connect(port, '127.0.0.1', () =>
            socket.write('PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01'),
          );
          socket.on('data', (c: Buffer) => (text += c.toString('latin1')));
          socket.on('error', reject);
          socket.on('close', () => resolve(text));
        }),
    ),
  );
  for (const text of answers) expect(text).toMatch(/^HTTP\/1\.1 408 /);
  expect(listening.door.counters().timeouts.body).toBe(STALLED);
  const written = timeoutLines();
  expect(written.filter((l) => l.level === INFO)).toHaveLength(5);
  expect(written.filter((l) => l.level === DEBUG)).toHaveLength(STALLED - 5);
});

it(`${STALLED} HTTP/2 streams of one connection whose body stalls: each answered 408 and counted, at most 5 info lines`, async () => {
  listening = await startFrontDoorServer({ limits: LIMITS, log, answer, tls: certificate.served });
  const session = http2.connect(`https://localhost:${listening.port}`, { ca: certificate.ca.certPem });
  session.on('error', () => {});
  try {
    const statuses = await Promise.all(
      Array.from(
        { length: STALLED },
        () =>
          new Promise<number | undefined>((resolve) => {
            const stream = session.request({ ':method': 'PUT', ':path': '/up', 'content-length': '10' });
            stream.write('01');
            let status: number | undefined;
            stream.on('response', (head) => (status = head[':status']));
            stream.on('error', () => {});
            stream.resume();
            stream.on('close', () => resolve(status));
          }),
      ),
    );
    expect(statuses).toEqual(Array(STALLED).fill(408));
  } finally {
    session.destroy();
  }
  expect(listening.door.counters().timeouts.body).toBe(STALLED);
  const written = timeoutLines();
  expect(written.filter((l) => l.level === INFO)).toHaveLength(5);
  expect(written.filter((l) => l.level === DEBUG)).toHaveLength(STALLED - 5);
});
