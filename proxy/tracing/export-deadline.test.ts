/** The exporter's requests are cut at their deadline (timers moved by hand); no other request is. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { ExportTimeoutError, type ExportTimers } from './bounded-export.ts';
import { cutExportRequestsAfter } from './export-deadline.ts';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

it('an export request still unanswered at the deadline is cut; a request of anything else is left alone', async () => {
  const due: (() => void)[] = [];
  const timers: ExportTimers = {
    setTimeout: (fn) => due.push(fn) - 1,
    clearTimeout: (handle) => {
      due[handle as number] = () => {};
    },
  };
  // A collector that takes the request and never answers.
  const held: http.ServerResponse[] = [];
  const collector = http.createServer((_req, res) => held.push(res));
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => {
    collector.closeAllConnections();
    collector.close();
  });
  let exporting = false;
  cleanups.push(cutExportRequestsAfter(1000, { timers, isExport: () => exporting }));
  const send = () => {
    const req = http.request({ port: (collector.address() as AddressInfo).port, host: '127.0.0.1', method: 'POST' });
    const errors: Error[] = [];
    req.on('error', (err) => errors.push(err));
    req.end('{}');
    return { req, errors };
  };
  exporting = true;
  const exported = send();
  exporting = false;
  const other = send();
  cleanups.push(() => other.req.destroy());
  await expect.poll(() => held.length).toBe(2);
  // One deadline armed: the exporter's request's only.
  expect(due).toHaveLength(1);
  due[0]!();
  expect(exported.req.destroyed).toBe(true);
  await expect.poll(() => exported.errors[0]).toBeInstanceOf(ExportTimeoutError);
  expect(other.req.destroyed).toBe(false);
});

it('a request answered in time clears its deadline', async () => {
  let armed = 0;
  let made = 0;
  const timers: ExportTimers = {
    setTimeout: () => {
      made++;
      return ++armed;
    },
    clearTimeout: () => armed--,
  };
  const collector = http.createServer((_req, res) => res.end('{}'));
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => collector.close());
  cleanups.push(cutExportRequestsAfter(1000, { timers, isExport: () => true }));
  await new Promise<void>((resolve, reject) => {
    const req = http.request(
      { port: (collector.address() as AddressInfo).port, host: '127.0.0.1', method: 'POST', agent: false },
      (res) => res.resume().on('end', resolve),
    );
    req.on('error', reject);
    req.end('{}');
  });
  expect(made).toBe(1);
  await expect.poll(() => armed).toBe(0);
});
