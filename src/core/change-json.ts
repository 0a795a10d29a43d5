// A change's JSON text, computed once per change object: the local queue stores exactly these
// bytes, and the jsonl sink appends them, so a change is serialized once on its way through.
import type { Change } from './change.js';

const texts = new WeakMap<Change, string>();

/** JSON.stringify(change), remembered for this object (a change is never mutated once built). */
export function changeJson(change: Change): string {
  let text = texts.get(change);
  if (text === undefined) {
    text = JSON.stringify(change);
    texts.set(change, text);
  }
  return text;
}

/** Parse stored JSON text back into a change that remembers the text it came from. */
export function parseChangeJson(text: string): Change {
  const change = JSON.parse(text) as Change;
  texts.set(change, text);
  return change;
}
