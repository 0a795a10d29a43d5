// Realistic, awkward text for generated resources: unicode, XML-special characters (& < > " ') and
// sometimes leading or trailing spaces, which clients must pass through untouched.
import type { Rng } from './prng.js';

const WORDS = [
  'Pilot',
  'Crème Brûlée',
  'Ünïcode',
  '東京物語',
  'Amélie',
  'Smörgåsbord',
  'Ça va',
  'Señor',
  'Tom & Jerry',
  '<Special>',
  '"Quoted"',
  "Rock 'n' Roll",
  'Zoë',
  'Bjørn',
  'Παράδεισος',
  'Мир',
  'Straße',
  'Night Shift',
  'Harbour Lights',
  'Q&A',
  'a < b > c',
  'Déjà Vu',
];

export function phrase(rng: Rng, prefix = ''): string {
  let text = `${prefix}${rng.pick(WORDS)} ${rng.pick(WORDS)}`;
  if (rng.chance(0.2)) text += ` – Part ${rng.int(1, 12)}`;
  if (rng.chance(0.08)) text = `  ${text}`;
  if (rng.chance(0.08)) text = `${text} `;
  return text;
}

export function code(rng: Rng, prefix: string): string {
  return `${prefix}-${rng.int(1000, 999_999)}`;
}

/** A comma-separated tag list, as brands and jobs carry it. */
export function tagList(rng: Rng, separator = ','): string {
  return rng
    .sample(['drama', 'hd', 'kids', 'featured', 'uhd', 'news', 'sport', 'urgent'], rng.int(1, 3))
    .join(separator);
}

/** An instant on whole seconds within `days` of `fromMs`, normalized (UTC, milliseconds, Z). */
export function instant(rng: Rng, fromMs: number, days: number): string {
  const ms = Math.floor(fromMs / 1000) * 1000 + rng.int(-days * 86_400, days * 86_400) * 1000;
  return new Date(ms).toISOString();
}
