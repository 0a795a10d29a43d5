// The package version, for the webhook's User-Agent. Read from package.json at run time because
// the file sits outside tsc's rootDir; the relative path is the same from src/ and dist/.
import { readFileSync } from 'node:fs';

let cached: string | undefined;

export function feedsyncVersion(): string {
  if (cached === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
        version?: unknown;
      };
      cached = typeof pkg.version === 'string' ? pkg.version : '0.0.0';
    } catch {
      cached = '0.0.0';
    }
  }
  return cached;
}
