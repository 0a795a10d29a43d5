// Per-sink positions for `status`, metrics and `replay` over the local store (any process: the
// daemon's own commits and a replay from the CLI are ordered by the store's single writer).
import type { CursorStore } from '../../store/cursors.js';
import type { Db } from '../../store/store.js';
import type { ReplayRequest, SinkPositionsAdmin } from '../queue.js';
import { replayRefusal, ReplayRefused, type ProducerSink } from '../sink-positions.js';
import { Backlog } from './backlog.js';
import { LaggingSinkRows } from './lagging-sinks.js';

export function localPositionsAdmin(db: Db, cursors: CursorStore, sinks: ProducerSink[]): SinkPositionsAdmin {
  const rows = new LaggingSinkRows(db);
  const backlog = new Backlog(db);
  const replay = db.transaction((req: ReplayRequest) => {
    const lag = rows.get(req.source, req.sink);
    const cursor = cursors.get(req.source)?.eventId;
    const refusal = replayRefusal(req, lag, cursor);
    if (refusal) throw new ReplayRefused(refusal);
    rows.leave(req.source, req.sink, req.from, 'replay', 0);
    return { before: lag ? lag.cursor : (cursor ?? null) };
  });
  return {
    lost: async () => rows.lost(),
    async lagging() {
      return rows.list().map((l) => ({
        ...l,
        backlog: backlog.of(l.sink),
        bound: sinks.find((s) => s.name === l.sink)?.maxBacklog ?? Number.MAX_SAFE_INTEGER,
      }));
    },
    async replay(req) {
      return replay.immediate(req);
    },
  };
}
