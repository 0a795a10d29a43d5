#!/usr/bin/env bash
# Re-resolves every container image pinned by digest (`image:tag@sha256:<hex>`) in the files
# below to the digest its tag points at now, and rewrites the pins in place. The tag says what
# to follow; the digest is what builds and tests get, byte for byte, until the next refresh.
# Run it on purpose (a scheduled job or by hand), review the diff, let CI build, commit it:
#   scripts/refresh-base-images.sh           rewrite the pins, print old -> new per image
#   scripts/refresh-base-images.sh --check   rewrite nothing; exit 1 when a pin is behind its tag
# Resolves with `crane digest` (go-containerregistry) when installed, else with
# `docker buildx imagetools inspect`; both read the registry's manifest index (the digest of
# the multi-platform index, so one pin serves amd64 and arm64) and pull no image.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FILES=(Dockerfile test/support/redis.ts)
check=0
case "${1:-}" in
  --check) check=1 ;;
  '') ;;
  *) echo "usage: refresh-base-images.sh [--check]" >&2; exit 2 ;;
esac

fail() {
  echo "refresh-base-images: $*" >&2
  exit 1
}

resolve() {
  local digest
  if command -v crane >/dev/null 2>&1; then
    digest="$(crane digest "$1")" || return 1
  elif command -v docker >/dev/null 2>&1; then
    digest="$(docker buildx imagetools inspect --format '{{.Manifest.Digest}}' "$1")" || return 1
  else
    fail "neither crane nor docker (with buildx) is installed: cannot ask the registry for $1"
  fi
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "the registry answered '$digest' for $1, not a sha256 digest"
  printf '%s\n' "$digest"
}

behind=0
for file in "${FILES[@]}"; do
  path="$ROOT/$file"
  [[ -f "$path" ]] || fail "$file is missing"
  while IFS= read -r pin; do
    [[ -n "$pin" ]] || continue
    ref="${pin%@*}" old="${pin#*@}"
    new="$(resolve "$ref")" || fail "cannot resolve $ref"
    if [[ "$new" == "$old" ]]; then
      echo "$file: $ref is current ($old)"
      continue
    fi
    behind=1
    echo "$file: $ref $old -> $new"
    if [[ $check == 0 ]]; then
      content="$(cat "$path")"
      printf '%s\n' "${content//"$ref@$old"/"$ref@$new"}" >"$path"
    fi
  done < <(grep -oE '[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}' "$path" | sort -u)
done

if [[ $check == 1 && $behind == 1 ]]; then
  fail "some pins are behind their tags: run scripts/refresh-base-images.sh"
fi
