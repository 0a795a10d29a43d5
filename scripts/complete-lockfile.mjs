// npm ≥ 11.6 refuses `npm ci` when a platform-specific optional dependency is missing from
// package-lock.json, and the registry this project installs from does not serve every platform's
// build of some packages (msgpackr-extract's darwin/win32/linux-arm binaries), so `npm install`
// leaves them out. Add a stub entry (name, version, os, cpu, optional) for each: npm then skips
// them on non-matching platforms exactly as it would with full entries. Run after `npm install`.
import { readFileSync, writeFileSync } from 'node:fs';

const path = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(path, 'utf8'));
const platform = /-(darwin|linux|win32|freebsd|android)-(x64|arm64|arm|ia32)(?:-(?:gnu|musl))?$/;
let added = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const target = `node_modules/${name}`;
    const nested = `${key}/node_modules/${name}`;
    if (lock.packages[target] || lock.packages[nested]) continue;
    const m = platform.exec(name);
    if (!m) continue;
    lock.packages[target] = {
      version,
      cpu: [m[2]],
      license: entry.license ?? 'UNKNOWN',
      optional: true,
      os: [m[1]],
    };
    added++;
  }
}
const sorted = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : 1)),
);
lock.packages = sorted;
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`complete-lockfile: added ${added} platform stub entr${added === 1 ? 'y' : 'ies'}`);
