// Writes an instant the way a dialect's `datetimes` switch says. The offset and the milliseconds
// depend only on the instant, so the JSON and the XML of one resource state it in the same words.
import type { Dialect } from './dialect.js';

const OFFSETS = [60, -330, 330, -480, 0];

/** ISO 8601 of an instant at a fixed offset from UTC, milliseconds only when not zero (or forced). */
export function formatWithOffset(
  ms: number,
  offsetMinutes: number,
  opts: { ms?: boolean; colon?: boolean } = {},
): string {
  const local = new Date(ms + offsetMinutes * 60_000).toISOString();
  const base = local.endsWith('.000Z') && !opts.ms ? local.slice(0, -5) : local.slice(0, -1);
  if (offsetMinutes === 0 && opts.colon !== false) return `${base}Z`;
  const sign = offsetMinutes < 0 ? '-' : '+';
  const abs = Math.abs(offsetMinutes);
  const hh = String(Math.floor(abs / 60)).padStart(2, '0');
  const mm = String(abs % 60).padStart(2, '0');
  return `${base}${sign}${hh}${opts.colon === false ? '' : ':'}${mm}`;
}

/**
 * A held datetime (normalized, or an event timestamp as generated) in the dialect's style;
 * `default` returns it unchanged (the XML writer has its own default shape).
 */
export function styleDatetime(held: string, style: Dialect['datetimes']): string {
  if (style === 'default') return held;
  const ms = Date.parse(held);
  const second = Math.floor(ms / 1000);
  switch (style) {
    case 'z':
      return formatWithOffset(ms, 0);
    case 'z-ms':
      return new Date(ms).toISOString();
    case 'offset':
      return formatWithOffset(ms, OFFSETS[second % OFFSETS.length] as number);
    case 'offset-ms':
      return formatWithOffset(ms, OFFSETS[second % OFFSETS.length] as number, { ms: true });
    case 'offset-basic':
      return formatWithOffset(ms, (OFFSETS[second % OFFSETS.length] as number) || 60, {
        ms: second % 2 === 0,
        colon: false,
      });
  }
}
