// The local store's writes failing, two ways that work as root (where chmod stops nothing):
//  store-full: the store lives on a small tmpfs of its own; a filler file takes every free byte
//              (writes fail with SQLITE_FULL), then is removed;
//  store-lock: another connection holds the database's write lock (BEGIN EXCLUSIVE, as a backup
//              tool or a stuck ops command would): writes wait out their busy timeout and fail
//              with SQLITE_BUSY, until it lets go.
import Database from 'better-sqlite3';
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Nemesis } from '../world.js';

export const storeFull: Nemesis = {
  kind: 'store-full',
  scenarios: ['local'],
  weight: 1,
  available: (ctx) => ctx.canMount,
  plan: (rng, ctx) => ({ target: 'store', params: { ms: Math.min(ctx.maxFaultMs, rng.int(1000, 5000)) } }),
  async run(world, step) {
    const dir = world.store?.mountDir;
    if (!dir) return;
    const filler = join(dir, 'filler');
    const t0 = world.now();
    const written = fill(filler);
    await world.sleep(Number(step.params.ms));
    rmSync(filler, { force: true });
    world.record({
      kind: 'store-full',
      target: 'store',
      pids: [],
      start: t0,
      end: world.now(),
      detail: { ...step.params, filled: written },
    });
  },
};

/** Writes until the file system is full; returns the bytes written. */
function fill(path: string): number {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(1 << 20);
  let total = 0;
  try {
    for (let size = chunk.length; size >= 512;) {
      try {
        total += writeSync(fd, chunk, 0, size);
      } catch {
        size >>= 1; // ENOSPC: smaller pieces for the last bytes
      }
    }
    // The last few bytes of the last block.
    for (;;) {
      try {
        if (writeSync(fd, chunk, 0, 1) === 0) break;
        total++;
      } catch {
        break;
      }
    }
  } finally {
    closeSync(fd);
  }
  return total;
}

export const storeLock: Nemesis = {
  kind: 'store-lock',
  scenarios: ['local'],
  weight: 1,
  plan: (rng, ctx) => ({ target: 'store', params: { ms: Math.min(ctx.maxFaultMs, rng.int(1000, 8000)) } }),
  async run(world, step) {
    const path = world.store?.path;
    if (!path) return;
    const db = new Database(path, { fileMustExist: true, timeout: 0 });
    try {
      // Never block the test's event loop on the lock: ask again until the owner is between writes.
      const deadline = Date.now() + 5_000;
      for (;;) {
        try {
          db.exec('BEGIN EXCLUSIVE');
          break;
        } catch (err) {
          if ((err as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() > deadline) throw err;
          await world.sleep(5);
        }
      }
      const t0 = world.now();
      await world.sleep(Number(step.params.ms));
      db.exec('ROLLBACK');
      world.record({
        kind: 'store-lock',
        target: 'store',
        pids: [],
        start: t0,
        end: world.now(),
        detail: { ...step.params },
      });
    } finally {
      db.close();
    }
  },
};
