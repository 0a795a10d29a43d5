// Numbered migrations, applied in order inside one transaction each; PRAGMA user_version records
// the last one applied. Append only: never edit a migration that has shipped.
export const migrations: { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'cursors, source status, locks, local queue, dead letters',
    sql: `
      CREATE TABLE cursors (
        source      TEXT PRIMARY KEY,
        event_id    INTEGER NOT NULL,
        -- ids above event_id already queued (workflow overlap), JSON array
        seen_above  TEXT NOT NULL DEFAULT '[]',
        updated_at  INTEGER NOT NULL
      );
      CREATE TABLE source_status (
        source          TEXT PRIMARY KEY,
        last_poll_at    INTEGER,
        last_ok_at      INTEGER,
        last_event_at   INTEGER,
        behind          INTEGER NOT NULL DEFAULT 0,
        last_error      TEXT
      );
      CREATE TABLE source_locks (
        source        TEXT PRIMARY KEY,
        owner         TEXT NOT NULL,
        heartbeat_at  INTEGER NOT NULL
      );
      CREATE TABLE deliveries (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        sink          TEXT NOT NULL,
        key           TEXT NOT NULL,
        subject_key   TEXT NOT NULL,
        body          TEXT NOT NULL,
        attempts      INTEGER NOT NULL DEFAULT 0,
        available_at  INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        UNIQUE (sink, key)
      );
      CREATE INDEX deliveries_by_sink ON deliveries (sink, id);
      CREATE INDEX deliveries_by_subject ON deliveries (sink, subject_key, id);
      CREATE TABLE dead_letters (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        sink       TEXT NOT NULL,
        key        TEXT NOT NULL,
        body       TEXT NOT NULL,
        attempts   INTEGER NOT NULL,
        error      TEXT NOT NULL,
        failed_at  INTEGER NOT NULL,
        UNIQUE (sink, key)
      );
    `,
  },
  {
    version: 2,
    name: 'index of retrying deliveries',
    // Partial: rows waiting for a retry are few, so the index costs nothing on the hot insert and
    // delete path, while the delivery loop's "when is the next retry due" stops scanning the backlog.
    sql: `CREATE INDEX deliveries_retrying ON deliveries (sink, available_at) WHERE available_at > 0;`,
  },
  {
    version: 3,
    name: 'no index of deliveries by subject',
    // Each page's rows landed at random places in this index and were removed from them again:
    // more than a third of the store's cost per change. Per-subject order is now kept in memory,
    // and by a scan of the oldest rows (in id order) while a change waits for a retry.
    sql: `DROP INDEX deliveries_by_subject;`,
  },
  {
    version: 4,
    name: 'page log: the rows of a page for one sink as one row',
    // The durability log of the memory path (docs/local-queue.md): a page's changes for one sink
    // written as ONE row (their JSON array) instead of one row each, deleted in one statement once
    // all are delivered. Their delivery ids are id .. id + n - 1, reserved in sqlite_sequence, so
    // the rows can be moved into `deliveries` under the same ids (after a failure, at a stop, at
    // start-up) and the delivery loop sees no difference.
    sql: `CREATE TABLE page_log (
      id    INTEGER PRIMARY KEY,
      sink  TEXT NOT NULL,
      n     INTEGER NOT NULL,
      rows  TEXT NOT NULL
    );`,
  },
  {
    version: 5,
    name: 'one owner per store',
    // The local queue's rows belong to one process: the store lease (src/lease/store-lease.ts)
    // replaces the per-source locks, which left the delivery loops and the logged pages unguarded.
    sql: `DROP TABLE source_locks;
      CREATE TABLE store_lease (
        id           INTEGER PRIMARY KEY CHECK (id = 1),
        owner        TEXT NOT NULL,
        token        INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
      );`,
  },
  {
    version: 6,
    name: 'per-sink positions',
    // A sink off a source's shared stream (parked, back-filling, replaying) has its own position
    // here (src/queue/sink-positions.ts); a live sink has no row. parked_ids: the ids the shared
    // poll passed for a parked sink, checked off by its catch-up. known_sinks: the sinks a source
    // has seen (a sink added later is back-filled once) and each one's generation (bumped by every
    // park and replay, so a catch-up page read for an older one is refused) and what it lost upstream.
    sql: `CREATE TABLE lagging_sinks (
        source        TEXT NOT NULL,
        sink          TEXT NOT NULL,
        cursor        INTEGER NOT NULL,
        seen_above    TEXT NOT NULL DEFAULT '[]',
        reason        TEXT NOT NULL,
        since         INTEGER NOT NULL,
        event_at      INTEGER NOT NULL DEFAULT 0,
        generation    INTEGER NOT NULL,
        ids           INTEGER NOT NULL DEFAULT 0,
        ids_truncated INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (source, sink)
      );
      CREATE TABLE parked_ids (
        source  TEXT NOT NULL,
        sink    TEXT NOT NULL,
        id      INTEGER NOT NULL,
        PRIMARY KEY (source, sink, id)
      ) WITHOUT ROWID;
      CREATE TABLE known_sinks (
        source      TEXT NOT NULL,
        sink        TEXT NOT NULL,
        generation  INTEGER NOT NULL DEFAULT 0,
        -- ids passed while it was parked that its catch-up never saw again (lost upstream)
        lost_count  INTEGER NOT NULL DEFAULT 0,
        lost_ids    TEXT NOT NULL DEFAULT '[]',
        lost_at     INTEGER,
        PRIMARY KEY (source, sink)
      );`,
  },
  {
    version: 7,
    name: 'queue counts kept by triggers',
    // What each sink has queued and dead-lettered, kept in the same statement as the rows it counts
    // (so it cannot drift, whoever writes: the daemon, `dlq retry` from another process): a page
    // commit's back-pressure check, a catch-up step, `status` and a metrics scrape read one row per
    // sink instead of counting the backlog. A logged page counts whole until its row goes, as before.
    // A dead letter buried again is an upsert (UPDATE), never a REPLACE: a REPLACE's implicit
    // delete fires no trigger.
    sql: `CREATE TABLE sink_counts (
        sink    TEXT PRIMARY KEY,
        queued  INTEGER NOT NULL DEFAULT 0,
        dead    INTEGER NOT NULL DEFAULT 0
      ) WITHOUT ROWID;
      INSERT INTO sink_counts (sink)
        SELECT sink FROM deliveries UNION SELECT sink FROM page_log UNION SELECT sink FROM dead_letters;
      UPDATE sink_counts SET
        queued = (SELECT COUNT(*) FROM deliveries d WHERE d.sink = sink_counts.sink)
               + (SELECT IFNULL(SUM(n), 0) FROM page_log p WHERE p.sink = sink_counts.sink),
        dead = (SELECT COUNT(*) FROM dead_letters x WHERE x.sink = sink_counts.sink);
      CREATE TRIGGER count_delivery_in AFTER INSERT ON deliveries BEGIN
        INSERT OR IGNORE INTO sink_counts (sink) VALUES (NEW.sink);
        UPDATE sink_counts SET queued = queued + 1 WHERE sink = NEW.sink;
      END;
      CREATE TRIGGER count_delivery_out AFTER DELETE ON deliveries BEGIN
        UPDATE sink_counts SET queued = queued - 1 WHERE sink = OLD.sink;
      END;
      CREATE TRIGGER count_page_in AFTER INSERT ON page_log BEGIN
        INSERT OR IGNORE INTO sink_counts (sink) VALUES (NEW.sink);
        UPDATE sink_counts SET queued = queued + NEW.n WHERE sink = NEW.sink;
      END;
      CREATE TRIGGER count_page_out AFTER DELETE ON page_log BEGIN
        UPDATE sink_counts SET queued = queued - OLD.n WHERE sink = OLD.sink;
      END;
      CREATE TRIGGER count_dead_in AFTER INSERT ON dead_letters BEGIN
        INSERT OR IGNORE INTO sink_counts (sink) VALUES (NEW.sink);
        UPDATE sink_counts SET dead = dead + 1 WHERE sink = NEW.sink;
      END;
      CREATE TRIGGER count_dead_out AFTER DELETE ON dead_letters BEGIN
        UPDATE sink_counts SET dead = dead - 1 WHERE sink = OLD.sink;
      END;`,
  },
];
