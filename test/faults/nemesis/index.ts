// Every fault the suite can inject, one module each.
import type { Nemesis } from '../world.js';
import { cursorRace } from './cursor.js';
import { feedDialect, upstreamErrors } from './feed.js';
import { freeze } from './freeze.js';
import { kill9 } from './kill9.js';
import { proxyCut, proxyFreeze } from './proxy.js';
import { redisFreeze, redisKill } from './redis.js';
import { replayRace } from './replay.js';
import { sinkFail, sinkHang, sinkSlow } from './sink.js';
import { storeFull, storeLock } from './store.js';

export const NEMESES: readonly Nemesis[] = [
  kill9,
  freeze,
  redisKill,
  redisFreeze,
  proxyCut,
  proxyFreeze,
  sinkFail,
  sinkHang,
  sinkSlow,
  storeFull,
  storeLock,
  cursorRace,
  replayRace,
  feedDialect,
  upstreamErrors,
];

export function nemesisOf(kind: string): Nemesis {
  const n = NEMESES.find((x) => x.kind === kind);
  if (!n) throw new Error(`no fault module for ${kind}`);
  return n;
}
