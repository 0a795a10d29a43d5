// Static checks of what an install or an image build would fetch and run, made before either
// runs (.ci/run calls it first; scripts/verify-image-steps.sh on its build context):
// - package-lock.json: every package entry carries a sha512 `integrity`, and a `resolved`, where
//   an entry has one, is a tarball on the npm registry (no git, file or other hosts);
// - install scripts: every locked package that has one is named in package.json "allowScripts"
//   (true: run by scripts/rebuild-approved.mjs after `npm ci --ignore-scripts`; false: never
//   run), and every name there is a locked package;
// - Dockerfile: every FROM (ARG defaults substituted) and any `# syntax=` frontend is pinned
//   by digest (`image:tag@sha256:<64 hex>`; refresh them with scripts/refresh-base-images.sh).
// Usage: node scripts/check-supply-chain.mjs [REPO_ROOT]. Prints every problem, naming the
// entry or line, and exits 1 when there is one.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REGISTRY = 'https://registry.npmjs.org/';
const DIGEST = /@sha256:[0-9a-f]{64}$/;

const root = resolve(process.argv[2] ?? join(fileURLToPath(import.meta.url), '../..'));
const problems = [];
const readJson = (file) => JSON.parse(readFileSync(join(root, file), 'utf8'));

/** `node_modules/a/node_modules/@s/b` → `@s/b`. */
const nameOfKey = (key) => key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length);
/** An allowScripts key is `name` or `name@version` (npm ≥ 11.16 accepts both). */
const nameOfAllowKey = (key) => {
  const at = key.indexOf('@', 1);
  return at === -1 ? key : key.slice(0, at);
};

function checkLockfile(pkg, lock) {
  if (!lock.packages) {
    problems.push('package-lock.json: no "packages" section (lockfileVersion 2 or 3 is needed)');
    return { entries: 0, scripted: 0 };
  }
  const allow = pkg.allowScripts ?? {};
  const allowed = new Set(Object.keys(allow).map(nameOfAllowKey));
  const locked = new Set();
  let entries = 0;
  let scripted = 0;
  for (const [key, entry] of Object.entries(lock.packages)) {
    if (key === '' || entry.link) continue;
    entries++;
    const name = entry.name ?? nameOfKey(key);
    locked.add(name);
    if (typeof entry.integrity !== 'string' || !entry.integrity.startsWith('sha512-')) {
      problems.push(
        `package-lock.json: ${key}@${entry.version} has no sha512 integrity ` +
          `(node scripts/complete-lockfile.mjs fills it from the registry)`,
      );
    }
    if (entry.resolved !== undefined && !String(entry.resolved).startsWith(REGISTRY)) {
      problems.push(`package-lock.json: ${key} resolves outside the npm registry: ${entry.resolved}`);
    }
    if (entry.hasInstallScript) {
      scripted++;
      if (!allowed.has(name)) {
        problems.push(
          `package-lock.json: ${key}@${entry.version} has install scripts but package.json ` +
            `"allowScripts" does not name ${name}: add "${name}": false (never run) or true (reviewed, run)`,
        );
      }
    }
  }
  for (const key of Object.keys(allow)) {
    if (typeof allow[key] !== 'boolean') {
      problems.push(`package.json: "allowScripts" entry ${key} must be true or false`);
    }
    if (!locked.has(nameOfAllowKey(key))) {
      problems.push(`package.json: "allowScripts" names ${key}, which is not in package-lock.json`);
    }
  }
  return { entries, scripted };
}

function checkDockerfile(text) {
  const args = new Map();
  const stages = new Set(['scratch']);
  let images = 0;
  const lines = text.split('\n');
  const syntax = /^#\s*syntax\s*=\s*(\S+)/i.exec(lines[0] ?? '');
  if (syntax && !DIGEST.test(syntax[1])) {
    problems.push(`Dockerfile:1: the frontend ${syntax[1]} is not pinned by digest`);
  }
  lines.forEach((line, i) => {
    const arg = /^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)=("?)(.*)\2\s*$/i.exec(line);
    if (arg) args.set(arg[1], arg[3]);
    const from = /^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$/i.exec(line);
    if (!from) return;
    const image = from[1].replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_, name) => args.get(name) ?? '');
    if (!stages.has(image.toLowerCase())) {
      images++;
      if (!DIGEST.test(image)) {
        problems.push(`Dockerfile:${i + 1}: ${from[1]} is ${image || 'empty'}, not pinned by digest`);
      }
    }
    if (from[2]) stages.add(from[2].toLowerCase());
  });
  if (images === 0) problems.push('Dockerfile: no FROM found');
  return images;
}

const pkg = readJson('package.json');
const { entries, scripted } = checkLockfile(pkg, readJson('package-lock.json'));
const images = checkDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8'));

if (problems.length > 0) {
  for (const p of problems) console.error(`check-supply-chain: ${p}`);
  process.exit(1);
}
console.log(
  `check-supply-chain: ok (${entries} locked packages with integrity, ` +
    `${scripted} with install scripts all decided in allowScripts, ${images} base images pinned by digest)`,
);
