/**
 * A rule-store write under a deadline whose failure never misstates what happened. Abandoning the
 * write at the deadline would leave it running (a Redis compare-and-set retrying, a PostgreSQL
 * transaction committing), so a client told "failed, retry" may find its change applied. Instead
 * the write is told to stop (`RuleDocumentStore.update`'s signal: no further attempt, no commit)
 * and its own answer is awaited as long again: a rejection then means nothing was written, a
 * success that it was. A store silent through both is `store_outcome_unknown`: only a read can
 * tell whether the change landed.
 */
import type { Logger } from 'pino';
import { RateLimitError } from './errors.ts';

export async function writeWithin(
  write: (signal: AbortSignal) => Promise<void>,
  timeoutMs: number,
  log: Logger,
): Promise<void> {
  const stop = new AbortController();
  const work = write(stop.signal);
  const deadline = setTimeout(
    () =>
      stop.abort(
        new RateLimitError(
          'store_timeout',
          `the rule store did not answer within ${timeoutMs} ms; nothing was written`,
        ),
      ),
    timeoutMs,
  );
  let giveUp: NodeJS.Timeout | undefined;
  const unanswered = new RateLimitError(
    'store_outcome_unknown',
    `the rule store did not answer within ${2 * timeoutMs} ms; the change may or may not have been written`,
  );
  const silent = new Promise<never>((_, reject) => {
    giveUp = setTimeout(() => reject(unanswered), 2 * timeoutMs);
  });
  try {
    await Promise.race([work, silent]);
  } catch (err) {
    // Only a write given up on answers later; the store's own outcome_unknown has answered already.
    if (err === unanswered)
      // The answer still comes (or the connection fails) some time: say then what it was.
      work.then(
        () => log.warn({ code: 'store_outcome_unknown' }, 'a rule write answered late: it was written'),
        (late: unknown) => log.warn({ err: late, code: 'store_outcome_unknown' }, 'a rule write failed late'),
      );
    throw err;
  } finally {
    clearTimeout(deadline);
    clearTimeout(giveUp);
  }
}
