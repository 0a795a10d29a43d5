// The field types every part of the config schema shares, sink schemas included (each sink
// module declares its own keys with these; see sinks/registry.ts).
import { z } from 'zod';

export const SERVICE_KINDS = ['scheduling', 'workflow'] as const;

// No `:` because change keys are `<source>:<event_id>`; no leading punctuation so names are
// safe in metric labels, Redis keys and file names.
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

export const name = z
  .string()
  .regex(NAME, { error: 'must start with a letter or digit and contain only letters, digits, _ . -' });
export const nonEmpty = z.string().min(1, { error: 'must not be empty' });
export const durationMs = z.number().int().nonnegative();
export const atLeastOne = z.number().int().min(1);

export function parseUrl(value: string): URL | undefined {
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}

export function isHttpUrl(value: string): boolean {
  const url = parseUrl(value);
  return url !== undefined && (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
}

export const httpUrl = z.string().refine(isHttpUrl, { error: 'must be an http(s) URL' });

/** Which changes a sink receives; every sink type has one. */
export const filterSchema = z
  .strictObject({
    sources: z.array(nonEmpty).default([]),
    services: z
      .array(
        z.string().refine((v) => (SERVICE_KINDS as readonly string[]).includes(v), {
          error: `must be one of: ${SERVICE_KINDS.join(', ')}`,
        }),
      )
      .default([]),
    event_types: z.array(nonEmpty).default([]),
    resource_types: z.array(nonEmpty).default([]),
  })
  .prefault({});

/** earliest | a non-negative integer event id: where a sink added later starts (it is back-filled). */
const sinkStartFrom = z.unknown().transform((value, ctx): 'earliest' | number => {
  if (value === 'earliest') return value;
  const id = typeof value === 'string' && /^[0-9]+$/.test(value) ? Number(value) : value;
  if (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) return id;
  ctx.addIssue({
    code: 'custom',
    message: `must be earliest or a non-negative integer event id (got ${JSON.stringify(value)})`,
  });
  return z.NEVER;
});

/**
 * The keys every sink type shares besides its own: its name, which changes it receives, how many
 * undelivered changes it may have queued before it is parked (default queue.max_backlog), and
 * where it starts when added to a deployment that already runs (default: from now on).
 */
export const sinkCommonFields = {
  name,
  filter: filterSchema,
  max_backlog: atLeastOne.optional(),
  start_from: sinkStartFrom.optional(),
};
