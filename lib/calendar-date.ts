/**
 * Strict dates and times for query parameters and CLI options (pure). `Date` rolls impossible
 * fields over (`2024-02-30` reads as March 1st, `T24:00` as the next day), so every field is checked
 * against the calendar before `Date` reads the value. Year 0 does not exist for PostgreSQL (1 BC).
 */

const DAY = /^(\d{4})-(\d{2})-(\d{2})$/;
/** A day, optionally a time (minutes at least, seconds and a fraction optional) and a UTC offset. */
const INSTANT =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:Z|([+-])(\d{2}):?(\d{2}))?)?$/;

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** True for `YYYY-MM-DD` naming a day that exists, from 0001-01-01. */
export function isCalendarDay(raw: string): boolean {
  const m = DAY.exec(raw);
  if (!m) return false;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  return year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month);
}

/**
 * The instant `raw` names: a calendar day (its midnight UTC) or an ISO 8601 time on one, hours
 * 00–23, minutes and seconds 00–59, offset up to ±23:59; a time without an offset is UTC, like a
 * day, so every gateway and the CLI read a value the same way whatever their time zone. Undefined
 * for anything else.
 */
export function parseInstant(raw: string): Date | undefined {
  const m = INSTANT.exec(raw);
  if (!m || !isCalendarDay(`${m[1]}-${m[2]}-${m[3]}`)) return undefined;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6]].map((f) =>
    f === undefined ? 0 : Number(f),
  ) as [number, number, number, number, number, number];
  const [offsetHours, offsetMinutes] = [m[9], m[10]].map((f) => (f === undefined ? 0 : Number(f))) as [number, number];
  if (hour > 23 || minute > 59 || second > 59 || offsetHours > 23 || offsetMinutes > 59) return undefined;
  const millis = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, '0'));
  const offsetMs = (m[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000;
  const at = new Date(0);
  // setUTCFullYear, not Date.UTC: Date.UTC maps years 0–99 to 1900–1999.
  at.setUTCFullYear(year, month - 1, day);
  at.setUTCHours(hour, minute, second, millis);
  return new Date(at.getTime() - offsetMs);
}
