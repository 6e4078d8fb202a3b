/**
 * The link's writes: what one turn of the event loop sends leaves in one channel write, in order,
 * and the other side handles each message of it as if it had come alone.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Link, MAX_UNSENT_MESSAGES } from './link.ts';
import type { Channel } from './link.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';

describe('Link', () => {
  it('sends the calls and notes of one turn in one write, handled in order on the other side', async () => {
    const { worker: workerEnd, primary: primaryEnd, writes } = channelPair();
    const worker = new Link(workerEnd);
    const primary = new Link(primaryEnd);
    const seen: string[] = [];
    primary.handle('echo', (args) => {
      seen.push(`echo ${String(args)}`);
      return `${String(args)}!`;
    });
    primary.handle('tell', (args) => {
      seen.push(`tell ${String(args)}`);
    });

    const answers = Promise.all([worker.call('echo', 'a'), worker.call('echo', 'b')]);
    worker.note('tell', 'c');
    await expect(answers).resolves.toEqual(['a!', 'b!']);
    expect(seen).toEqual(['echo a', 'echo b', 'tell c']);
    // One write each way: the three messages, and the two answers.
    expect(writes.worker).toHaveLength(1);
    expect(writes.worker[0]).toMatchObject({
      arkvory: 'batch',
      messages: [{ op: 'echo' }, { op: 'echo' }, { op: 'tell' }],
    });
    expect(writes.primary).toHaveLength(1);
    expect(writes.primary[0]).toMatchObject({
      arkvory: 'batch',
      messages: [{ arkvory: 'answer' }, { arkvory: 'answer' }],
    });
  });

  it('sends a message alone when the turn has no other, and a later turn in a write of its own', async () => {
    const { worker: workerEnd, primary: primaryEnd, writes } = channelPair();
    const worker = new Link(workerEnd);
    const primary = new Link(primaryEnd);
    primary.handle('echo', (args) => args);
    await expect(worker.call('echo', 1)).resolves.toBe(1);
    await expect(worker.call('echo', 2)).resolves.toBe(2);
    expect(writes.worker).toEqual([
      { arkvory: 'call', id: 1, op: 'echo', args: 1 },
      { arkvory: 'call', id: 2, op: 'echo', args: 2 },
    ]);
  });

  it('grants nothing from a batch that arrives after the link closed, and answers nothing', async () => {
    const { worker: workerEnd, primary: primaryEnd, writes } = channelPair();
    const worker = new Link(workerEnd);
    const primary = new Link(primaryEnd);
    let handled = 0;
    primary.handle('admit', () => ++handled);
    // Two calls in one write, read after the coordinating side learnt the other is gone.
    void worker.call('admit');
    void worker.call('admit');
    primary.close();
    for (let i = 0; i < 3; i++) await nextTurn();
    expect(writes.worker).toHaveLength(1);
    expect(handled).toBe(0);
    expect(writes.primary).toEqual([]);
  });

  it('refuses new calls at once while the channel holds MAX_UNSENT_MESSAGES unwritten; notes still go; writes taken end it', async () => {
    // A channel whose other side stopped reading: it keeps each write, taking none until told.
    const held: Array<{ message: unknown; taken: (err: Error | null) => void }> = [];
    const stuck: Channel = {
      send: (message, taken) => held.push({ message, taken }),
      on: () => stuck,
    };
    const link = new Link(stuck);
    const calls: Array<Promise<unknown>> = [];
    for (let i = 0; i < MAX_UNSENT_MESSAGES; i++) calls.push(link.call('admit', i).catch(() => undefined));
    await nextTurn();
    expect(held).toHaveLength(1); // one turn, one write of all of them
    await expect(link.call('admit', 'one more')).rejects.toMatchObject({
      code: 'unavailable',
      headers: { 'retry-after': '1' },
    });
    // A release must still reach the other side once it reads: it is written, not refused.
    link.note('release', 7);
    await nextTurn();
    expect(held).toHaveLength(2);
    expect(held[1]!.message).toEqual({ arkvory: 'note', op: 'release', args: 7 });
    // The other side reads again: the channel takes the writes, and calls go out again.
    for (const write of held) write.taken(null);
    const again = link.call('admit', 'again');
    await nextTurn();
    expect(held).toHaveLength(3);
    expect(held[2]!.message).toMatchObject({ arkvory: 'call', op: 'admit', args: 'again' });
    link.close();
    await expect(again).rejects.toMatchObject({ code: 'unavailable' });
    await Promise.all(calls);
  });
});
