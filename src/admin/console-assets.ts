// The console's files (src/admin/console/, copied to dist/admin/console/ by the build), read once
// when the listener starts and served from memory by a fixed table: no path from a request ever
// reaches the file system.
import { readFileSync } from 'node:fs';

const FILES: Record<string, [file: string, type: string]> = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/console.js': ['console.js', 'text/javascript; charset=utf-8'],
  '/console.css': ['console.css', 'text/css; charset=utf-8'],
  '/favicon.svg': ['favicon.svg', 'image/svg+xml'],
};

export interface Asset {
  type: string;
  body: Buffer;
}

/** URL path → file. `../admin/console/` from this module is the same directory unbundled (dist/admin/) and bundled (dist/cli-chunks/). */
export function loadConsoleAssets(dir = new URL('../admin/console/', import.meta.url)): Map<string, Asset> {
  return new Map(
    Object.entries(FILES).map(([path, [file, type]]) => [
      path,
      { type, body: readFileSync(new URL(file, dir)) },
    ]),
  );
}
