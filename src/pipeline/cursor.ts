export const PAGE_SIZE = 50;

export interface CursorStep {
  /** The next `newer_than`. */
  cursor: number;
  /** Ids above the new cursor that this page (or an earlier one) already queued: skip them when re-listed. */
  seenAbove: number[];
}

/**
 * Choose the next cursor after a page so that no event can be skipped.
 *
 * `newer_than` filters by id, but a feed may list events in another order (the workflow feed is
 * ordered by timestamp). A full page holds the first 50 events *in listing order* among those with
 * id > cursor; an event not on the page may still have a smaller id than some event that is. Moving
 * the cursor to the page's largest id would then skip it forever.
 *
 * Rule: if the page is short, the feed returned everything newer than the cursor, so the largest id
 * is safe. If it is full, the cursor moves to the (50 − D)-th smallest id of the page, where D is
 * the most places the service lists an event away from its id order (`maxDisorder`). Proof: an
 * event whose id ranks r among all events newer than the cursor is listed at a position ≤ r + D, so
 * each of the 50 − D smallest ids is listed within the first 50 places, i.e. on this page; no
 * unseen event has an id at or below the new cursor. The ≤ D events of the page above the new
 * cursor are re-listed by the next request and recognised through `seenAbove`, not queued twice.
 * With D = 0 (the scheduling feed, ordered by id) this is simply the largest id.
 *
 * `pageIds` are the page's ids above the previous cursor; `full` is whether the page listed 50
 * events in all. A full page that also re-lists events at or below `newer_than` holds fewer than 50
 * ids above it, but it is still full: the feed may hold more events than it showed.
 */
export function nextCursor(
  previous: { cursor: number; seenAbove: number[] },
  pageIds: number[],
  maxDisorder: number,
  full = pageIds.length >= PAGE_SIZE,
): CursorStep {
  const seen = new Set([...previous.seenAbove, ...pageIds]);
  if (pageIds.length === 0) return { cursor: previous.cursor, seenAbove: previous.seenAbove };
  const sorted = [...pageIds].sort((a, b) => a - b);
  const index = full ? Math.max(0, sorted.length - 1 - maxDisorder) : sorted.length - 1;
  const cursor = Math.max(previous.cursor, sorted[index]!);
  const seenAbove = [...seen].filter((id) => id > cursor).sort((a, b) => a - b);
  return { cursor, seenAbove };
}

/** How far the page's listing order strays from its id order: the largest displacement, and whose. */
export function observedDisorder(pageIds: number[]): { disorder: number; eventId: number } {
  const rank = new Map([...pageIds].sort((a, b) => a - b).map((id, i) => [id, i]));
  let disorder = 0;
  let eventId = pageIds[0] ?? 0;
  pageIds.forEach((id, i) => {
    const d = Math.abs(i - rank.get(id)!);
    if (d > disorder) [disorder, eventId] = [d, id];
  });
  return { disorder, eventId };
}
