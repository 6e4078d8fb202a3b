/**
 * The link over a real IPC channel whose other end has died: what it sends then must not become an
 * unhandled 'error' event, which would take the coordinating process (and so the instance) down
 * when one worker is killed while an answer to it is on its way.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { expect, it } from 'vitest';
import { Link } from './link.ts';

it('sends to a process that has exited are dropped without an error event', async () => {
  const child = spawn(process.execPath, ['-e', 'process.on("message", () => {})'], {
    stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
  });
  const errors: unknown[] = [];
  child.on('error', (err) => errors.push(err));
  const link = new Link(child);
  link.handle('slow', async () => {
    await once(child, 'exit');
    return 'too late';
  });
  // An answer the child asked for, sent after it died (as a grant to a killed worker would be).
  child.emit('message', { arkvory: 'call', id: 1, op: 'slow', args: undefined });
  child.kill('SIGKILL');
  await once(child, 'exit');
  link.note('after-exit');
  for (let i = 0; i < 5; i++) await nextTurn();
  expect(child.connected).toBe(false);
  expect(errors).toEqual([]);
});
