# feedsync container image: a build stage with the native toolchain, a slim runtime stage
# without it. scripts/verify-image-steps.sh replays these steps without a Docker engine;
# keep the two in step when changing either.
# No `# syntax=` line: the builder's own Dockerfile frontend reads this file, so no frontend
# image is pulled (one would have to be pinned by digest like the base images).

# Base images pinned by digest (the tag only documents which one): a rebuild gets the same
# bytes until the pins are refreshed on purpose with scripts/refresh-base-images.sh
# (docs/supply-chain.md). scripts/check-supply-chain.mjs refuses a FROM without a digest.
ARG NODE_IMAGE=node:24-bookworm@sha256:64af3819f9275802414d7cdc38c27e9d82bd564dec4d4da87d008255d36c63b4
ARG NODE_RUNTIME_IMAGE=node:24-bookworm-slim@sha256:0e0ff40c39bc087845bfb27465a0df4ea419520094bc35842ff83dd8cbe6f9b6

FROM ${NODE_IMAGE} AS build
# The toolchain is for native modules without a binary for the platform: better-sqlite3 (13+)
# carries prebuilt binaries for linux x64/arm64 in its package; msgpackr-extract (BullMQ's) gets
# one from an optional platform package and compiles from source otherwise.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# The image's bundled npm (11.x on node:24). npm >= 11.6.2 refuses a lockfile that lacks other
# platforms' optional packages (npm/cli#8805); package-lock.json carries stub entries for them
# (scripts/complete-lockfile.mjs), so `npm ci` accepts it. Dependencies first so this layer is
# cached until the lockfile changes. --ignore-scripts: no dependency's install script runs
# except those package.json "allowScripts" approves, which scripts/rebuild-approved.mjs then
# runs (`npm rebuild` of exactly those); and our own `prepare` would try to compile TypeScript
# before the sources are copied.
COPY package.json package-lock.json ./
COPY scripts/rebuild-approved.mjs scripts/rebuild-approved.mjs
RUN npm ci --ignore-scripts --no-audit --no-fund \
 && node scripts/rebuild-approved.mjs
COPY tsconfig.json ./
COPY scripts/build.mjs scripts/build.mjs
# Only the product's sources: the benchmark (bench/) and the tests are not in the image.
COPY src src
RUN npm run build
# Production dependencies only, taken from THIS stage: `npm prune` keeps the already-compiled
# better-sqlite3 binary, so the runtime stage needs no compiler and never runs install
# scripts. Both stages are Debian bookworm with the same Node major, so the binary's glibc
# and Node ABI match. (The alternative, `npm ci --omit=dev --ignore-scripts` followed by
# `npm rebuild better-sqlite3` in the runtime stage, would need python3/make/g++ there.)
RUN npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_RUNTIME_IMAGE} AS runtime
# tini as PID 1 forwards SIGTERM/SIGINT to node and reaps zombies, so the graceful stop
# (CONTRACT §1) runs when Kubernetes or `docker stop` asks for it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 feedsync \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin feedsync \
 && mkdir -p /data /etc/feedsync/secrets \
 && chown 10001:10001 /data
# The young-generation bound the daemon commands would otherwise restart themselves to get
# (src/heap.ts, docs/performance.md): set here, `run` starts without the restart. An operator's
# own NODE_OPTIONS replaces this; feedsync then adds the bound itself unless it names one.
# (Node refuses --min-semi-space-size in NODE_OPTIONS; the restart sets both.)
ENV NODE_ENV=production \
    NODE_OPTIONS=--max-semi-space-size=8 \
    FEEDSYNC_CONFIG=/etc/feedsync/feedsync.yaml
WORKDIR /app
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The example configs ship in the package (package.json "files"); the Kubernetes one is the
# image default. It reads credentials from *_file paths under /etc/feedsync/secrets/.
COPY config ./config
COPY config/kubernetes.yaml /etc/feedsync/feedsync.yaml
# A plain symlink (no `npm link`): dist/cli.js carries the node shebang and resolves its
# dependencies from /app/node_modules through the link's real path.
RUN ln -s /app/dist/cli.js /usr/local/bin/feedsync \
 && feedsync --version
USER 10001:10001
VOLUME ["/data"]
EXPOSE 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9464/healthz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--", "feedsync"]
CMD ["run"]
