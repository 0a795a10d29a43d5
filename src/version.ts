import { readFileSync } from 'node:fs';

// dist/version.js and src/version.ts both sit one level below package.json.
export const version: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
