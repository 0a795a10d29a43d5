// ISO 8601 date-time recognition and normalization to UTC with milliseconds and `Z`.
// Written by hand because Date.parse silently rolls invalid dates over (Feb 30 → Mar 2) and
// accepts zone-less strings as local time, both of which would corrupt occurred_at.

const ISO_DATETIME =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * The longest text read as a date-time: `YYYY-MM-DDTHH:MM:SS+HH:MM` is 25 characters, which leaves
 * 38 for fractional seconds (of which 3 are kept). Longer text is no date-time a service meant.
 */
export const MAX_DATETIME_CHARS = 64;

/**
 * The instant as `YYYY-MM-DDTHH:MM:SS.mmmZ`, or undefined when `s` is not a complete, valid
 * ISO 8601 date-time with a zone (`Z` or a numeric offset). With `zoneless: 'utc'`, a date-time
 * without a zone is read as UTC instead of refused.
 */
export function normalizeDateTime(s: string, zoneless: 'reject' | 'utc' = 'reject'): string | undefined {
  // Every string of a decoded body comes through here: most are not date-times, and a T at index
  // 10 with at least YYYY-MM-DDTHH:MM is what ISO_DATETIME needs before it can match. The longest
  // bound keeps the match short whatever upstream sends.
  if (s.length < 16 || s.length > MAX_DATETIME_CHARS || s.charCodeAt(10) !== 84 /* T */) return undefined;
  const m = ISO_DATETIME.exec(s);
  if (!m) return undefined;
  const [, y, mo, d, hh, mi, ss = '0', frac = '', zone = zoneless === 'utc' ? 'Z' : undefined] = m;
  if (zone === undefined) return undefined;
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  const hour = Number(hh);
  const minute = Number(mi);
  const second = Number(ss);
  if (month < 1 || month > 12) return undefined;
  if (day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;
  let offsetMinutes = 0;
  if (zone !== 'Z') {
    const sign = zone.startsWith('-') ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const oh = Number(digits.slice(0, 2));
    const om = digits.length > 2 ? Number(digits.slice(2)) : 0;
    if (oh > 23 || om > 59) return undefined;
    offsetMinutes = sign * (oh * 60 + om);
  }
  // Already in the normalized form (what our own output and most services send): the checks
  // above are all it needed, and the string is its own result.
  if (zone === 'Z' && frac.length === 3 && s.length === 24) return s;
  // Milliseconds are truncated, as Date.parse does with finer fractions.
  const ms = frac === '' ? 0 : Number(frac.slice(0, 3).padEnd(3, '0'));
  // setUTCFullYear rather than Date.UTC, which maps years 0–99 to 1900–1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute - offsetMinutes, second, ms);
  return date.toISOString();
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}
