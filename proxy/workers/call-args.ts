/**
 * The arguments of a worker's calls to the coordinating process, checked there before they reach the
 * instance's shared state (policy-host.ts): one buggy worker's NaN, negative, fractional or unbounded
 * number would otherwise skew the bandwidth governors, the admission queue, a repository's transfer
 * count or a rate-limit counter for every worker. Each parser returns the arguments in their typed
 * shape or throws `MalformedCallError`; the call then fails and changes nothing.
 */
import type { TransferKind } from '../../policy/admission/index.ts';
import type { Ceiling } from '../../policy/bandwidth/index.ts';
import type { Plan, PlannedRule } from '../../policy/rate-limit/evaluate.ts';

/** What a worker's calls carry, as the coordinating process takes them once checked. */
export interface TakeRequest {
  direction: 'download' | 'upload';
  principalId: string;
  weight: number;
  ceilings: Ceiling[];
  bytes: number;
  /** The stream's first take: only that one sets the principal's weight, as a new meter does. */
  opens: boolean;
  /** The stream's place in its principal's fair order: the answer to its previous take (0 at first). */
  tag: number;
}

export interface AdmitRequest {
  principalId: string;
  kind: TransferKind;
}

/**
 * The answer to an admission: the slot's id, or with slots lent beside it (slot-lending.ts) that id
 * and the lent ones'.
 */
export type AdmitAnswer = number | { id: number; lent: number[] };

/** One of the `max` concurrent transfers of `repository` (its bound as the asking worker read it). */
export interface HoldRequest {
  repository: string;
  max: number;
}

export interface CreateSessionRequest {
  principal: { id: string; name: string; disabledAtMs: number | null };
  authorization: string;
}

/** Bounds a string field of a call: a principal id, a repository, a key (the gateway's own are far shorter). */
export const MAX_CALL_STRING = 4096;
/** Bounds a take's ceilings and a rate-limit call's rules and keys (a principal's groups and rules are far fewer). */
export const MAX_CALL_LIST = 1024;

export class MalformedCallError extends Error {
  override readonly name = 'MalformedCallError';
  readonly code = 'malformed_call';
  constructor(op: string, what: string) {
    super(`malformed "${op}" call from a worker: ${what}`);
  }
}

type Check = (ok: boolean, what: string) => asserts ok;

function checker(op: string): Check {
  return (ok, what) => {
    if (!ok) throw new MalformedCallError(op, what);
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isName(value: unknown): value is string {
  return typeof value === 'string' && value !== '' && value.length <= MAX_CALL_STRING;
}

function isCount(value: unknown, min = 0): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= min;
}

function isDirection(value: unknown): value is 'download' | 'upload' {
  return value === 'download' || value === 'upload';
}

/** `max`: the byte count a take may ask, the quantum the worker's meter splits chunks to at most. */
export function parseTake(args: unknown, maxBytes: number): TakeRequest {
  const check: Check = checker('take');
  check(isRecord(args), 'arguments: expected an object');
  const { direction, principalId, weight, ceilings, bytes, opens, tag } = args;
  check(isDirection(direction), 'direction: expected "download" or "upload"');
  check(isName(principalId), 'principalId: expected a non-empty string');
  check(isCount(weight, 1), 'weight: expected an integer of at least 1');
  check(isCount(bytes) && bytes <= maxBytes, `bytes: expected an integer from 0 to ${maxBytes}`);
  check(typeof opens === 'boolean', 'opens: expected a boolean');
  // A place in fair order: virtual time in bytes per weight, so never beyond a safe integer.
  check(
    typeof tag === 'number' && Number.isFinite(tag) && tag >= 0 && tag <= Number.MAX_SAFE_INTEGER,
    'tag: expected a number ≥ 0',
  );
  check(Array.isArray(ceilings) && ceilings.length <= MAX_CALL_LIST, `ceilings: expected at most ${MAX_CALL_LIST}`);
  const list: Ceiling[] = [];
  for (const ceiling of ceilings as unknown[]) {
    check(isRecord(ceiling), 'ceiling: expected an object');
    check(isName(ceiling.key), 'ceiling key: expected a non-empty string');
    check(isCount(ceiling.rateBytesPerSec, 1), 'ceiling rate: expected an integer of at least 1');
    list.push({ key: ceiling.key, rateBytesPerSec: ceiling.rateBytesPerSec });
  }
  return { direction, principalId, weight, ceilings: list, bytes, opens, tag };
}

export function parseAdmit(args: unknown): AdmitRequest {
  const check: Check = checker('admit');
  check(isRecord(args), 'arguments: expected an object');
  const { principalId, kind } = args;
  check(isName(principalId), 'principalId: expected a non-empty string');
  check(isDirection(kind), 'kind: expected "download" or "upload"');
  return { principalId, kind };
}

export function parseHold(args: unknown): HoldRequest {
  const check: Check = checker('repository.hold');
  check(isRecord(args), 'arguments: expected an object');
  const { repository, max } = args;
  check(isName(repository), 'repository: expected a non-empty string');
  check(isCount(max, 1), 'max: expected an integer of at least 1');
  return { repository, max };
}

/** A worker's lent slots held unused, by kind (slot-lending.ts). */
export function parseReady(args: unknown): Record<TransferKind, number> {
  const check: Check = checker('admission.ready');
  check(isRecord(args), 'arguments: expected an object');
  const { download, upload } = args;
  check(isCount(download, 0), 'download: expected an integer of at least 0');
  check(isCount(upload, 0), 'upload: expected an integer of at least 0');
  return { download: download as number, upload: upload as number };
}

/** The id of a slot or hold to release; `op` names the release. */
export function parseHeldId(op: string, args: unknown): number {
  const check: Check = checker(op);
  check(isCount(args, 1), 'id: expected an integer of at least 1');
  return args as number;
}

/** Any string: the table knows its own ids (an unknown one is no session). */
export function parseSessionId(op: string, args: unknown): string {
  const check: Check = checker(op);
  check(typeof args === 'string', 'session id: expected a string');
  return args as string;
}

type RunInput = { nowMs: number; cost: number; mode: 'check' | 'peek' };

export function parseCountersRun(args: unknown): [Plan, RunInput] {
  const check: Check = checker('counters.run');
  check(Array.isArray(args) && args.length === 2, 'arguments: expected [plan, input]');
  const [plan, input] = args as unknown[];
  check(isRecord(input), 'input: expected an object');
  const { nowMs, cost, mode } = input;
  check(isCount(nowMs), 'nowMs: expected an integer ≥ 0');
  // The limiter's own bound: floats allowed, never NaN, negative or infinite.
  check(typeof cost === 'number' && Number.isFinite(cost) && cost >= 0, 'cost: expected a finite number ≥ 0');
  check(mode === 'check' || mode === 'peek', 'mode: expected "check" or "peek"');
  check(isRecord(plan), 'plan: expected an object');
  check(Array.isArray(plan.counting) && plan.counting.length <= MAX_CALL_LIST, 'plan counting: expected a list');
  check(plan.skip === undefined || isRecord(plan.skip), 'plan skip: expected a rule');
  for (const p of plan.counting as unknown[]) {
    check(isRecord(p) && isRecord(p.rule), 'planned rule: expected an object with its rule');
    check(p.action === 'limit' || p.action === 'log', 'action: expected "limit" or "log"');
    check(
      typeof p.limit === 'number' && Number.isFinite(p.limit) && p.limit >= 0,
      'limit: expected a finite number ≥ 0',
    );
    check(isCount(p.periodMs, 1), 'periodMs: expected an integer of at least 1');
    check(isCount(p.banMs), 'banMs: expected an integer ≥ 0');
    check(isCount(p.windowEndMs), 'windowEndMs: expected an integer ≥ 0');
    check(isName(p.counterKey) && isName(p.banKey), 'keys: expected non-empty strings');
    check(p.distinctValue === undefined || typeof p.distinctValue === 'string', 'distinctValue: expected a string');
    check(typeof p.distinctValue !== 'string' || p.distinctValue.length <= MAX_CALL_STRING, 'distinctValue: too long');
  }
  return [plan as unknown as Plan & { counting: readonly PlannedRule[] }, { nowMs, cost, mode }];
}

export function parseCountersClear(args: unknown): string[] {
  const check: Check = checker('counters.clear');
  check(Array.isArray(args) && args.length <= MAX_CALL_LIST, `keys: expected a list of at most ${MAX_CALL_LIST}`);
  for (const key of args as unknown[]) check(isName(key), 'key: expected a non-empty string');
  return args as string[];
}

/** Where a malformed call is told: the coordinating process's logger. */
export interface MalformedCallLog {
  warn(fields: object, message: string): void;
}

/**
 * Parses a call's arguments and reports a malformed one once per worker and op (a worker with a bug
 * sends the same bad call per request; the op names are few, so the log is bounded), then fails it.
 */
export class CallChecks {
  readonly #log: MalformedCallLog | undefined;
  readonly #reported = new WeakMap<object, Set<string>>();

  constructor(log?: MalformedCallLog) {
    this.#log = log;
  }

  parse<T>(worker: object, op: string, parse: () => T): T {
    try {
      return parse();
    } catch (err) {
      if (err instanceof MalformedCallError) this.#report(worker, op, err);
      throw err;
    }
  }

  #report(worker: object, op: string, err: MalformedCallError): void {
    let ops = this.#reported.get(worker);
    if (!ops) this.#reported.set(worker, (ops = new Set()));
    if (ops.has(op)) return;
    ops.add(op);
    this.#log?.warn(
      { op, err },
      'a worker sent a malformed call; it was refused and changed nothing (further ones of this op from this worker are not logged)',
    );
  }
}

export function parseCreateSession(args: unknown): CreateSessionRequest {
  const check: Check = checker('sessions.create');
  check(isRecord(args) && isRecord(args.principal), 'arguments: expected an object with its principal');
  const { principal, authorization } = args as { principal: Record<string, unknown>; authorization: unknown };
  const { id, name, disabledAtMs } = principal;
  check(
    isName(id) && typeof name === 'string' && name.length <= MAX_CALL_STRING,
    'principal: expected its id and name',
  );
  check(disabledAtMs === null || isCount(disabledAtMs), 'disabledAtMs: expected null or an integer ≥ 0');
  check(isName(authorization), 'authorization: expected a non-empty string');
  return { principal: { id, name, disabledAtMs }, authorization };
}
