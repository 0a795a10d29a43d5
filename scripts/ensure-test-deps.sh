#!/usr/bin/env bash
# The suite talks to a real redis-server (with Debian's redis-tools for redis-cli and
# redis-sentinel for Sentinel setups), checks metrics with promtool (Debian's prometheus
# package), reads the sandbox with clients other people wrote: curl (--digest) and Python's
# requests (Debian's python3-requests), goes through a real forward proxy (tinyproxy), makes a
# private PKI with the openssl CLI and runs a private PostgreSQL cluster for the postgres sink
# (Debian's postgresql: initdb and pg_ctl live in /usr/lib/postgresql/<version>/bin), and drives
# the admin console in Debian's chromium (through puppeteer-core). Install
# whichever is missing when we may (root, apt available); otherwise say what to do.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v curl >/dev/null 2>&1 || missing+=(curl)
python3 -c 'import requests' >/dev/null 2>&1 || missing+=(python3-requests)
command -v tinyproxy >/dev/null 2>&1 || missing+=(tinyproxy)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1; } &&
  { compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || command -v pg_ctl >/dev/null 2>&1; } &&
  command -v psql >/dev/null 2>&1 || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing test dependencies: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "the tests need: ${missing[*]} (Debian/Ubuntu: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
