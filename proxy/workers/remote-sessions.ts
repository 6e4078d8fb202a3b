/**
 * The console's sign-in sessions with several workers: the instance's one table is the coordinating
 * process's (`serveSessions`), and each worker creates, looks up, marks used (an operator's action)
 * and deletes over its link (`remoteSessionStore`), so a browser stays signed in whichever worker the
 * kernel gives each of its connections, and a sign-out ends the session on every worker. Each call has a
 * deadline; a call that fails or misses it is 503 `unavailable`, never a session.
 */
import { PolicyError } from '../../policy/errors.ts';
import { type ConsoleSession, type ConsoleSessions, isSessionId, type SessionStore } from '../console/sessions.ts';
import { CallChecks, type CreateSessionRequest, parseCreateSession, parseSessionId } from './call-args.ts';
import type { Link } from './link.ts';

/** How long a worker waits for the coordinating process to answer a session call. */
export const SESSION_CALL_DEADLINE_MS = 2000;

export type { CreateSessionRequest };

/** Serves one worker's session calls on its link from the instance's table. */
export function serveSessions(link: Link, table: ConsoleSessions, checks = new CallChecks()): void {
  const id = (op: string, args: unknown) => checks.parse(link, op, () => parseSessionId(op, args));
  link.handle('sessions.create', (args) => {
    const { principal, authorization } = checks.parse(link, 'sessions.create', () => parseCreateSession(args));
    return table.create(
      { id: principal.id, name: principal.name, disabledAtMs: principal.disabledAtMs ?? undefined },
      authorization,
    );
  });
  // null, not undefined: the answer is a message field.
  link.handle('sessions.get', (args) => table.get(id('sessions.get', args)) ?? null);
  link.handle('sessions.touch', (args) => table.touch(id('sessions.touch', args)));
  link.handle('sessions.delete', (args) => table.delete(id('sessions.delete', args)));
}

/** A worker's view of the instance's sessions, over its link. */
export function remoteSessionStore(link: Link, deadlineMs = SESSION_CALL_DEADLINE_MS): SessionStore {
  const ask = async <T>(op: string, args: unknown, onLate?: (value: T) => void): Promise<T> => {
    try {
      return await link.call<T>(op, args, AbortSignal.timeout(deadlineMs), onLate);
    } catch (err) {
      throw unavailable(err);
    }
  };
  return {
    create: (principal, authorization) => {
      // null, not undefined: the answer is a message field.
      const request: CreateSessionRequest = {
        principal: { id: principal.id, name: principal.name, disabledAtMs: principal.disabledAtMs ?? null },
        authorization,
      };
      // A session made after this worker gave up is nobody's: it goes at once.
      return ask<ConsoleSession>('sessions.create', request, (late) => link.note('sessions.delete', late.id));
    },
    get: async (id) => {
      if (!isSessionId(id)) return undefined;
      return (await ask<ConsoleSession | null>('sessions.get', id)) ?? undefined;
    },
    // Awaited, not a note: an action whose use was not recorded would leave the session to idle out.
    touch: async (id) => {
      await ask<void>('sessions.touch', id);
    },
    delete: async (id) => {
      await ask<void>('sessions.delete', id);
    },
  };
}

function unavailable(cause: unknown): PolicyError {
  return new PolicyError('unavailable', 'The console sessions could not be reached; retry shortly.', {
    cause,
    headers: { 'retry-after': '1' },
  });
}
