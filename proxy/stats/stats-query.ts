/** The filters of the usage statistics listings, checked (pure): admin API query and CLI options alike. */
import { decimalInteger } from '../../lib/decimal.ts';
import { isCalendarDay } from '../../lib/calendar-date.ts';
import { GatewayError } from '../server/errors.ts';

export const STATS_DEFAULT_LIMIT = 100;
export const STATS_MAX_LIMIT = 1000;

function whole(raw: string | undefined, name: string, min: number, max: number, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = decimalInteger(raw);
  if (n === undefined || n < min || n > max)
    throw new GatewayError('invalid_request', `${name} must be an integer from ${min} to ${max}`);
  return n;
}

/** A calendar day PostgreSQL takes as `::date` (an impossible one would be a 500 there). */
function day(raw: string | undefined, name: string): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!isCalendarDay(raw))
    throw new GatewayError('invalid_request', `${name} must be a calendar day from 0001-01-01, YYYY-MM-DD`);
  return raw;
}

export interface ArtifactStatsQuery {
  /** `top`: most downloaded first; `idle`: published artifacts not downloaded for `days` days. */
  readonly view: 'top' | 'idle';
  readonly days: number;
  readonly repository?: string;
  readonly limit: number;
}

export function parseArtifactStatsQuery(raw: {
  view?: string | undefined;
  days?: string | undefined;
  repository?: string | undefined;
  limit?: string | undefined;
}): ArtifactStatsQuery {
  const view = raw.view ?? 'top';
  if (view !== 'top' && view !== 'idle') throw new GatewayError('invalid_request', 'view must be top or idle');
  if (raw.days !== undefined && view !== 'idle') throw new GatewayError('invalid_request', 'days goes with view=idle');
  return {
    view,
    days: whole(raw.days, 'days', 0, 36500, 30),
    ...(raw.repository ? { repository: raw.repository } : {}),
    limit: whole(raw.limit, 'limit', 1, STATS_MAX_LIMIT, STATS_DEFAULT_LIMIT),
  };
}

export interface PrincipalStatsQuery {
  readonly principal?: string;
  readonly since?: string;
  readonly until?: string;
  readonly limit: number;
}

export function parsePrincipalStatsQuery(raw: {
  principal?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
  limit?: string | undefined;
}): PrincipalStatsQuery {
  const since = day(raw.since, 'since');
  const until = day(raw.until, 'until');
  return {
    ...(raw.principal ? { principal: raw.principal } : {}),
    ...(since ? { since } : {}),
    ...(until ? { until } : {}),
    limit: whole(raw.limit, 'limit', 1, STATS_MAX_LIMIT, STATS_DEFAULT_LIMIT),
  };
}
