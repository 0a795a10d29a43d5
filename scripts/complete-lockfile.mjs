// Run after `npm install` changes package-lock.json. Two gaps it fills:
// - npm ≥ 11.6 refuses `npm ci` when a platform-specific optional dependency is missing from
//   package-lock.json, and `npm install` may leave out other platforms' builds of some packages
//   (msgpackr-extract's darwin/win32/linux-arm binaries) when the registry it installs from does
//   not serve them. Add an entry (name, version, os, cpu, optional) for each: npm then skips them
//   on non-matching platforms exactly as it would with full entries.
// - Every entry carries the sha512 `integrity` of its tarball (scripts/check-supply-chain.mjs
//   refuses a lockfile without one): an entry lacking it gets the registry's
//   `dist.integrity` for its exact version (`npm view`), or the script fails naming it.
import { execFileSync } from 'node:child_process';
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

let hashed = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  if (key === '' || entry.link || entry.integrity) continue;
  const name = key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length);
  const spec = `${name}@${entry.version}`;
  const integrity = execFileSync('npm', ['view', spec, 'dist.integrity'], { encoding: 'utf8' }).trim();
  if (!integrity.startsWith('sha512-')) {
    throw new Error(`complete-lockfile: the registry gives no sha512 integrity for ${spec} (${key})`);
  }
  // Keep npm's own key order: version, resolved, integrity, then the rest.
  const { version, resolved, ...rest } = entry;
  lock.packages[key] = { version, ...(resolved ? { resolved } : {}), integrity, ...rest };
  hashed++;
}

// npm's own order (arborist compares keys with localeCompare 'en'), so npm leaves it as is.
const sorted = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => a.localeCompare(b, 'en')));
lock.packages = sorted;
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(
  `complete-lockfile: added ${added} platform entr${added === 1 ? 'y' : 'ies'}, ` +
    `${hashed} integrit${hashed === 1 ? 'y' : 'ies'} from the registry`,
);
