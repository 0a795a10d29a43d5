// What the mirrors' schema migrations tell the operator, shared by the sqlite and postgres mirrors:
// the versions, and for a migration that rewrites existing rows, what it did to them.
import type { Logger } from 'pino';

/** A migration: its SQL, and optionally a query counting (one row) what it does to existing rows. */
export interface Migration {
  sql: string;
  survey?: { sql: string; report: (version: number, counts: Record<string, number>) => MigrationReport };
}

/** What a migration did to existing rows, counted in its transaction before it changed them. */
export interface MigrationReport {
  version: number;
  level: 'info' | 'warn';
  message: string;
  counts: Record<string, number>;
}

export interface MigrationResult {
  /** The version found before migrating (0: a new mirror). */
  from: number;
  to: number;
  reports: MigrationReport[];
}

/**
 * Rows keyed by (source, subject_url) (sqlite version 3, postgres version 2). Each existing row is
 * attributed to the source of the last change applied to it, named by its last_key
 * (`<source>:<event_id>`, a source name holds no colon): its guard (last_event_id, and for the
 * workflow feed the timestamp) is that source's feed position, so only that source may be
 * compared with it. Where the source column named another source (the sqlite mirror recorded a
 * skipped change's position without its source), the row is reattributed; a row whose last_key is
 * not of that form keeps its source column. `counts`: rows, reattributed, unattributed.
 */
export function perSourceReport(version: number, counts: Record<string, number>): MigrationReport {
  const { rows = 0, reattributed = 0, unattributed = 0 } = counts;
  return {
    version,
    // Either case means a source's row held another source's data: worth a replay (docs).
    level: reattributed + unattributed > 0 ? 'warn' : 'info',
    message:
      `mirror rows keyed by (source, subject_url): ${rows} row(s) kept, each under the source of its ` +
      `last change; ${reattributed} reattributed (the last change came from another source than the ` +
      `subject), ${unattributed} kept their source column (last_key names no source)`,
    counts: { rows, reattributed, unattributed },
  };
}

/** Logs the migration (one line), then each report (one line each). */
export function logMigration(
  logger: Logger,
  mirror: 'sqlite' | 'postgres',
  fields: Record<string, unknown>,
  result: MigrationResult,
): void {
  const { from, to } = result;
  logger.info(
    { ...fields, from, to },
    from === to ? `${mirror} mirror schema up to date` : `${mirror} mirror schema migrated`,
  );
  for (const report of result.reports)
    logger[report.level](
      { ...fields, version: report.version, ...report.counts },
      `${mirror} ${report.message}`,
    );
}
