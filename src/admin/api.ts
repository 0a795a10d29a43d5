// The admin API's routes (docs/admin.md): each calls the same function as its CLI
// command (src/commands/*) and answers with the CLI's `--json` shape. Transport, authentication
// and audit are the server's (server.ts); a route only says whether it changes something.
import { z } from 'zod';
import type { FeedsyncConfig } from '../config/types.js';
import {
  actOnDeadLetters,
  countDeadLetters,
  deadLetterJson,
  findDeadLetters,
  matchesQuery,
  parseDeadLetterId,
  readsThrough,
} from '../commands/dlq.js';
import type {
  DeadLetterAction,
  DeadLetterJson,
  DeadLetterQuery,
  DeadLetterSelection,
} from '../commands/dlq.js';
import { cursorSource, moveCursor, readCursors } from '../commands/cursor.js';
import type { OpsHandles } from '../commands/admin.js';
import { planReplay, startReplay } from '../commands/replay.js';
import { readStatus } from '../commands/status.js';
import type { ActivityLog } from './activity.js';
import type { Role } from './tokens.js';

export interface AdminContext {
  config: FeedsyncConfig;
  /** The queue's operations: the daemon's own driver where it has them all, else one opened for them. */
  ops: () => Promise<Pick<OpsHandles, 'sourceState' | 'leases' | 'admin' | 'positions'>>;
  /** This process's deliveries (absent where it delivers nothing). */
  activity?: ActivityLog;
}

export interface AdminRequest {
  params: string[];
  query: URLSearchParams;
  body: unknown;
  role: Role;
  /** A console session's CSRF token (the page asks for it again after a reload). */
  csrf?: string;
}

/** What a change did, for the audit log and feedsync_admin_changes_total. */
export interface Audit {
  action: 'retry' | 'drop' | 'replay' | 'cursor';
  /** How many things it acted on (dead letters, replays, cursors). */
  count: number;
  dry_run: boolean;
  /** What it was asked to act on, as given (no credential can be in it: names, ids, filters). */
  target: unknown;
}

export interface AdminAnswer {
  status: number;
  body: unknown;
  audit?: Audit;
}

export interface Route {
  method: 'GET' | 'POST' | 'PUT';
  /** The path with `{param}` segments; also the `route` label of feedsync_admin_requests_total. */
  path: string;
  /** Needs the write token. */
  changes: boolean;
  handle(ctx: AdminContext, req: AdminRequest): Promise<AdminAnswer>;
}

/** An answer other than 200, thrown by a route: the status and the message the client sees. */
export class AdminError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

const DEFAULT_PAGE = 50;
const MAX_PAGE = 500;
/**
 * Dead letters read per page request when it filters on what the queue does not (source, event
 * type, error text): a bound on memory and time; the answer says when the list went on past it.
 */
export const MAX_SCAN = 10_000;
const MAX_IDS = 1_000;
/** A text filter longer than this is a mistake (an error text is cut far shorter when shown). */
const MAX_QUERY_CHARS = 500;

const name = z.string().min(1).max(200);
const queryShape = z.strictObject({
  sink: name.optional(),
  key: name.optional(),
  source: name.optional(),
  event_type: z.string().min(1).max(MAX_QUERY_CHARS).optional(),
  q: z.string().max(MAX_QUERY_CHARS).optional(),
});
const selectionBody = z
  .strictObject({
    ids: z.array(z.string().min(3).max(500)).min(1).max(MAX_IDS).optional(),
    filter: queryShape.optional(),
    dry_run: z.boolean().default(false),
  })
  .refine((b) => (b.ids === undefined) !== (b.filter === undefined), {
    message: 'give either "ids" or "filter" (use "filter": {} to act on every dead letter)',
  });
const replayBody = z.strictObject({
  sink: name,
  source: name.optional(),
  from: z.union([z.literal('earliest'), z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)]),
});
const cursorBody = z.union([
  z.strictObject({ cursor: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER) }),
  z.strictObject({ reset: z.literal(true) }),
]);

/** `value` as the schema has it, or a 400 naming each field that does not fit. */
function parse<T>(schema: z.ZodType<T>, value: unknown, what = 'request body'): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.map((i) =>
    i.path.length ? `${i.path.join('.')}: ${i.message}` : i.message,
  );
  throw new AdminError(400, `invalid ${what}: ${problems.join('; ')}`);
}

/** The dead-letter filters of a query string (`?sink=&source=&event_type=&q=&key=`). */
function queryOf(params: URLSearchParams): DeadLetterQuery {
  const raw: Record<string, string> = {};
  for (const key of ['sink', 'key', 'source', 'event_type', 'q'])
    if (params.has(key) && params.get(key) !== '') raw[key] = params.get(key) as string;
  return parse(queryShape, raw, 'query');
}

function intParam(params: URLSearchParams, key: string, fallback: number, max: number): number {
  const value = params.get(key);
  if (value === null || value === '') return fallback;
  if (!/^\d{1,9}$/.test(value) || Number(value) > max)
    throw new AdminError(400, `query parameter ${key} must be an integer from 0 to ${max}`);
  return Number(value);
}

/** A page of dead letters: `cursor` is where the page starts in the matching list (oldest first). */
export interface DeadLetterPage {
  dead_letters: DeadLetterJson[];
  /** Pass as `cursor` for the next page; null on the last. */
  next_cursor: string | null;
  /** The filter reads dead letters through (source, event type, q) and stopped after MAX_SCAN of them. */
  scan_truncated: boolean;
}

async function deadLetterPage(ctx: AdminContext, req: AdminRequest): Promise<DeadLetterPage> {
  const query = queryOf(req.query);
  const limit = Math.max(1, intParam(req.query, 'limit', DEFAULT_PAGE, MAX_PAGE));
  const offset = intParam(req.query, 'cursor', 0, Number.MAX_SAFE_INTEGER);
  const ops = await ctx.ops();
  // One more than the page: whether there is a next one.
  const want = offset + limit + 1;
  let matched;
  let truncated = false;
  if (readsThrough(query)) {
    const window = await ops.admin.listDead({ sink: query.sink, key: query.key }, MAX_SCAN + 1);
    truncated = window.length > MAX_SCAN;
    matched = window.slice(0, MAX_SCAN).filter(matchesQuery(query)).slice(0, want);
  } else matched = await findDeadLetters(ops, query, want);
  const page = matched.slice(offset, offset + limit);
  return {
    dead_letters: page.map(deadLetterJson),
    next_cursor: matched.length > offset + limit ? String(offset + limit) : null,
    scan_truncated: truncated,
  };
}

function selectionOf(body: z.infer<typeof selectionBody>): DeadLetterSelection {
  if (body.ids) {
    for (const id of body.ids) parseId(id);
    return { ids: body.ids };
  }
  return { query: body.filter ?? {} };
}

function parseId(id: string): { sink: string; key: string } {
  try {
    return parseDeadLetterId(id);
  } catch (err) {
    throw new AdminError(400, (err as Error).message);
  }
}

function deadLetterChange(action: DeadLetterAction): Route {
  return {
    method: 'POST',
    path: `/api/v1/dead-letters/${action}`,
    changes: true,
    async handle(ctx, req) {
      const body = parse(selectionBody, req.body);
      const selection = selectionOf(body);
      const ops = await ctx.ops();
      const count = body.dry_run
        ? await countDeadLetters(ops, selection)
        : await actOnDeadLetters(ops, action, selection);
      return {
        status: 200,
        body: { action, dry_run: body.dry_run, count },
        audit: {
          action,
          count,
          dry_run: body.dry_run,
          target: 'ids' in selection ? { ids: selection.ids.length } : selection.query,
        },
      };
    },
  };
}

export const routes: Route[] = [
  {
    method: 'GET',
    path: '/api/v1/session',
    changes: false,
    handle: async (_ctx, req) => ({
      status: 200,
      body: { role: req.role, ...(req.csrf === undefined ? {} : { csrf: req.csrf }) },
    }),
  },
  {
    method: 'GET',
    path: '/api/v1/status',
    changes: false,
    handle: async (ctx) => ({ status: 200, body: await readStatus(ctx.config, await ctx.ops()) }),
  },
  {
    method: 'GET',
    path: '/api/v1/sources',
    changes: false,
    handle: async (ctx) => ({
      status: 200,
      body: { sources: (await readStatus(ctx.config, await ctx.ops())).sources },
    }),
  },
  {
    method: 'GET',
    path: '/api/v1/sinks',
    changes: false,
    async handle(ctx) {
      const { sinks, positions } = await readStatus(ctx.config, await ctx.ops());
      return { status: 200, body: { sinks, positions, activity: ctx.activity?.read() ?? [] } };
    },
  },
  {
    method: 'GET',
    path: '/api/v1/cursors',
    changes: false,
    handle: async (ctx) => ({
      status: 200,
      body: { cursors: await readCursors(ctx.config, await ctx.ops()) },
    }),
  },
  {
    method: 'GET',
    path: '/api/v1/dead-letters',
    changes: false,
    handle: async (ctx, req) => ({ status: 200, body: await deadLetterPage(ctx, req) }),
  },
  {
    method: 'GET',
    path: '/api/v1/dead-letters/{id}',
    changes: false,
    async handle(ctx, req) {
      const id = parseId(req.params[0] ?? '');
      const [found] = await findDeadLetters(await ctx.ops(), id, 1);
      if (!found) throw new AdminError(404, `no dead letter ${id.sink}/${id.key}`);
      return { status: 200, body: deadLetterJson(found) };
    },
  },
  deadLetterChange('retry'),
  deadLetterChange('drop'),
  {
    method: 'POST',
    path: '/api/v1/replay',
    changes: true,
    async handle(ctx, req) {
      const body = parse(replayBody, req.body);
      const args = { sink: body.sink, source: body.source, from: String(body.from) };
      const plan = planReplay(ctx.config, args);
      const replays = await startReplay(await ctx.ops(), plan);
      return {
        status: 200,
        body: { replays },
        audit: { action: 'replay', count: replays.length, dry_run: false, target: args },
      };
    },
  },
  {
    method: 'PUT',
    path: '/api/v1/sources/{name}/cursor',
    changes: true,
    async handle(ctx, req) {
      const body = parse(cursorBody, req.body);
      const source = cursorSource(ctx.config, req.params[0]);
      // `reset` is the start of the feed: `latest` pages through the upstream feed, a long job for
      // the CLI (`feedsync cursor reset --to latest`, with its progress and Ctrl-C), not a request.
      const target = 'cursor' in body ? body.cursor : 0;
      const moved = await moveCursor(await ctx.ops(), source, target, {
        update: () => undefined,
        done: () => undefined,
      });
      return {
        status: 200,
        body: moved,
        audit: {
          action: 'cursor',
          count: 1,
          dry_run: false,
          target: { source: source.name, cursor: target },
        },
      };
    },
  },
];

/** The route for a method and path, and the decoded `{param}` segments; undefined: no such path. */
export function findRoute(
  method: string,
  path: string,
): { route: Route; params: string[] } | { allowed: string[] } | undefined {
  const segments = path.split('/');
  const allowed: string[] = [];
  for (const route of routes) {
    const pattern = route.path.split('/');
    if (pattern.length !== segments.length) continue;
    const params: string[] = [];
    let ok = true;
    for (let i = 0; i < pattern.length && ok; i++) {
      const p = pattern[i] as string;
      const s = segments[i] as string;
      if (p.startsWith('{')) {
        const decoded = decode(s);
        if (decoded === undefined || decoded === '') ok = false;
        else params.push(decoded);
      } else ok = p === s;
    }
    if (!ok) continue;
    if (route.method === method || (method === 'HEAD' && route.method === 'GET')) return { route, params };
    allowed.push(route.method);
  }
  return allowed.length ? { allowed } : undefined;
}

function decode(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}
