import type { FeedsyncConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';
import { findLatestEventId } from '../pipeline/poller.js';
import { services } from '../services/index.js';
import { createUpstreamClient } from '../upstream/client.js';
import { openOps } from './admin.js';

export class CommandError extends Error {}

/** `feedsync cursor show | set SOURCE ID | reset SOURCE --to latest|earliest`. */
export async function cursorCommand(
  config: FeedsyncConfig,
  action: 'show' | 'set' | 'reset',
  args: { source?: string; id?: string; to?: string },
  out: (s: string) => void,
): Promise<void> {
  const ops = await openOps(config);
  try {
    if (action === 'show') {
      for (const s of await ops.cursors.status(config.sources.map((x) => x.name)))
        out(`${s.source}\t${s.cursor ?? '(none: start_from applies)'}`);
      return;
    }
    const source = config.sources.find((s) => s.name === args.source);
    if (!source)
      throw new ConfigError(
        '',
        `unknown source "${args.source}" (configured: ${config.sources.map((s) => s.name).join(', ')})`,
      );
    const holder = await ops.lockHolder(source.name);
    if (holder)
      throw new CommandError(
        `refusing to move the cursor of "${source.name}": a poller holds it (${holder}); stop it first`,
      );
    let target: number;
    if (action === 'set') {
      if (!args.id || !/^\d+$/.test(args.id))
        throw new ConfigError('', `cursor set needs a non-negative integer event id, got "${args.id}"`);
      target = Number(args.id);
    } else if (args.to === 'earliest') target = 0;
    else if (args.to === 'latest') {
      const client = createUpstreamClient({
        source: source.name,
        username: source.username,
        password: source.password,
        format: source.format,
        timeoutMs: source.timeout_ms,
        linkRel: services[source.service].linkRel,
      });
      try {
        target = await findLatestEventId(client, source.base_url);
      } finally {
        await client.close();
      }
    } else throw new ConfigError('', `cursor reset needs --to latest or --to earliest, got "${args.to}"`);
    const before = (await ops.cursors.get(source.name))?.eventId;
    await ops.cursors.save(source.name, target, []);
    out(`${source.name}: cursor ${before ?? '(none)'} → ${target}`);
  } finally {
    await ops.close();
  }
}
