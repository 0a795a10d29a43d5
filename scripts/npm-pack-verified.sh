#!/usr/bin/env bash
# Usage: npm-pack-verified.sh SPEC INTEGRITY DIR
# Fetches SPEC (NAME@EXACT_VERSION from the npm registry) with `npm pack` into the empty
# directory DIR and prints the tarball's path, but only when the tarball's sha512 equals
# INTEGRITY, the `sha512-<base64>` the caller pins (`npm view NAME@VERSION dist.integrity`).
# `npm pack` checks the tarball against the integrity the registry itself announces; the pin
# also holds when the registry, a mirror or a proxy on the way serves something else.
# Every script that downloads something to run goes through here (scripts/node24.sh,
# scripts/fetch-helm.sh, scripts/verify-image-steps.sh). Runs on any node/npm: node24.sh calls
# it before Node 24 may exist.
set -eu

if [ $# -ne 3 ]; then
  echo "usage: npm-pack-verified.sh SPEC INTEGRITY DIR" >&2
  exit 2
fi
spec=$1 expected=$2 dir=$3

case "$expected" in
  sha512-?*) ;;
  *) echo "npm-pack-verified: $spec: the pinned integrity must be sha512-<base64>, got '$expected'" >&2; exit 1 ;;
esac

(cd "$dir" && npm pack --silent --ignore-scripts "$spec" >/dev/null) ||
  { echo "npm-pack-verified: npm pack $spec failed" >&2; exit 1; }
set -- "$dir"/*.tgz
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "npm-pack-verified: npm pack $spec left no single tarball in $dir" >&2
  exit 1
fi
tarball=$1

actual=$(node -e '
  const data = require("fs").readFileSync(process.argv[1]);
  process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(data).digest("base64"));
' "$tarball") || { echo "npm-pack-verified: cannot hash $tarball" >&2; exit 1; }

if [ "$actual" != "$expected" ]; then
  rm -f "$tarball"
  echo "npm-pack-verified: REFUSED $spec: its tarball's integrity is $actual, the pinned one is $expected" >&2
  echo "npm-pack-verified: nothing was unpacked; if the pin is outdated, take the new value from 'npm view $spec dist.integrity' after reviewing the release" >&2
  exit 1
fi
printf '%s\n' "$tarball"
