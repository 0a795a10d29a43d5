#!/usr/bin/env node
// Entry point of the `feedsync` command. It loads nothing but node:module and src/heap.ts before
// deciding whether to restart itself: the daemon commands need a young-generation size that can
// only be set when Node starts (src/heap.ts says why). process.execve replaces this process in
// place — same PID, same stdio, signals and exit code are the restarted program's own — so a
// supervisor (tini, systemd, a test) sees one process. Where execve is missing (Windows) the
// daemon runs with V8's default and a higher peak RSS. Setting the flag yourself (NODE_OPTIONS,
// as the Docker image does) skips the restart and its ~30 ms. docs/performance.md has the figures.
import { enableCompileCache } from 'node:module';
import { daemonNodeFlags } from './heap.js';

const flags = daemonNodeFlags(process.argv.slice(2), process.execArgv, process.env.NODE_OPTIONS);
if (flags.length > 0 && typeof process.execve === 'function') {
  try {
    process.execve(process.execPath, [
      process.execPath,
      ...process.execArgv,
      ...flags,
      ...process.argv.slice(1),
    ]);
  } catch {
    // execve returns only when it failed (e.g. a sandbox forbids it): run as we are.
  }
}

// Node keeps compiled bytecode of every module on disk (os.tmpdir()/node-compile-cache): from the
// second start on, loading the dependencies takes about a third less. NODE_DISABLE_COMPILE_CACHE=1
// turns it off; an unwritable directory only means no cache. Enabled before the program is
// imported, so commander and everything after it are cached too.
enableCompileCache();
await import('./cli-program.js');
