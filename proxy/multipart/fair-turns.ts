/**
 * Which queued completion job runs next (pure): round robin across principals, oldest job first
 * within one. First in, first out let one principal's 200 queued completions delay another's
 * 1-byte completion by all of them; here a principal waiting for its first turn goes before any
 * principal that has had one, so another principal's job waits at most for the job running now.
 */

/** The oldest queued job of one principal (`principal` '' for sessions opened without one). */
export interface QueueHead {
  readonly jobId: string;
  readonly principal: string;
}

/** Compares bigserial ids given as decimal text. */
function olderJob(a: string, b: string): boolean {
  return a.length !== b.length ? a.length < b.length : a < b;
}

export class FairTurns {
  /** The turn each principal last had; principals with nothing queued are forgotten. */
  readonly #lastTurn = new Map<string, number>();
  #turn = 0;

  /**
   * The head to run next: the principal whose last turn is oldest (never: oldest of all), ties to
   * the older job. Records the turn.
   */
  next(heads: readonly QueueHead[]): QueueHead | undefined {
    let best: QueueHead | undefined;
    let bestTurn = Number.POSITIVE_INFINITY;
    for (const head of heads) {
      const turn = this.#lastTurn.get(head.principal) ?? -1;
      if (turn < bestTurn || (turn === bestTurn && best !== undefined && olderJob(head.jobId, best.jobId))) {
        best = head;
        bestTurn = turn;
      }
    }
    // Bounded by the principals with queued jobs: one that comes back later starts afresh.
    if (this.#lastTurn.size > heads.length) {
      const queued = new Set(heads.map((h) => h.principal));
      for (const principal of this.#lastTurn.keys()) if (!queued.has(principal)) this.#lastTurn.delete(principal);
    }
    if (best) this.#lastTurn.set(best.principal, ++this.#turn);
    return best;
  }
}
