#!/usr/bin/env bash
# Replays the Dockerfile's build and runtime stages without a Docker engine, so CI can check
# them where no daemon runs. It does NOT build the image: base-image contents, apt packages
# (tini) and file ownership are not exercised. Steps, in a clean temporary directory:
#   1. build context = the repo's files as git sees them (tracked + untracked, not ignored)
#   2. build stage: npm ci --ignore-scripts, rebuild native modules, npm run build, prune dev deps
#   3. runtime stage: copy package.json, node_modules, dist, config like the Dockerfile does,
#      put a `feedsync` symlink on PATH, install the default config as /etc/feedsync/feedsync.yaml
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
# The npm the node:20 images bundle (10.x), not the host's: npm >= 11.6.2 rejects a lockfile
# that lacks other platforms' optional packages (npm/cli#8805), which npm 10 accepts.
IMAGE_NPM_VERSION="${IMAGE_NPM_VERSION:-10}"
NPM=(npx --yes "npm@$IMAGE_NPM_VERSION")

step "1/4 build context from git ls-files"
mkdir -p "$CONTEXT"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -f "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$CONTEXT"
for f in package.json package-lock.json tsconfig.json scripts/build.mjs src/cli.ts config/kubernetes.yaml; do
  [[ -f "$CONTEXT/$f" ]] || fail "build context lacks $f (the Dockerfile COPYs it)"
done

step "2/4 build stage"
# Each command individually: `set -e` does not apply inside a `( ... ) || fail` group.
run() { "$@" >&2 || fail "$* (in $PWD)"; }
mkdir -p "$BUILD"
cp "$CONTEXT/package.json" "$CONTEXT/package-lock.json" "$BUILD/"
cd "$BUILD"
run "${NPM[@]}" ci --ignore-scripts --loglevel=error
# The native build (~1.5 min from source) and the TypeScript build are independent: run them
# side by side to stay well under the CI budget. The Dockerfile runs them one after the other.
JOBS=max run "${NPM[@]}" rebuild better-sqlite3 msgpackr-extract --loglevel=error &
rebuild_pid=$!
cp "$CONTEXT/tsconfig.json" .
mkdir -p scripts && cp "$CONTEXT/scripts/build.mjs" scripts/
cp -R "$CONTEXT/src" src
run "${NPM[@]}" run build --silent
wait "$rebuild_pid" || fail "npm rebuild better-sqlite3 msgpackr-extract"
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
[[ -n "$(find "$APP/node_modules/better-sqlite3/build" -name 'better_sqlite3.node' 2>/dev/null)" ]] ||
  fail "better-sqlite3 native module missing from the runtime node_modules"

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
