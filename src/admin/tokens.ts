// The admin API's bearer tokens: read from their files once, at start-up, and kept only as
// SHA-256 digests. A presented token is digested too and compared with timingSafeEqual: equal
// lengths always, so neither the comparison's time nor an early length mismatch tells how much
// of a guess was right.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { AdminConfig } from '../config/types.js';
import { ConfigError } from '../core/errors.js';

/** What a token may do: `write` reads and changes, `read` only reads. Also the audit log's label. */
export type Role = 'write' | 'read';

export interface AdminTokens {
  /** The role of a presented token, or undefined when it is none of them. */
  roleOf(token: string): Role | undefined;
  /** Signs console sessions: derived from both tokens, so every process with them agrees and a new token ends the sessions. */
  sessionKey: Buffer;
}

const digest = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/** Reads the token files (relative to the config's directory); a missing or empty one is a ConfigError naming its key. */
export function readAdminTokens(admin: AdminConfig, configDir: string): AdminTokens {
  if (admin.token_file === undefined)
    throw new ConfigError('admin.token_file', 'required when admin.enabled is true');
  const write = digest(readToken(admin.token_file, 'admin.token_file', configDir));
  const read =
    admin.read_token_file === undefined
      ? undefined
      : digest(readToken(admin.read_token_file, 'admin.read_token_file', configDir));
  if (read && timingSafeEqual(read, write))
    throw new ConfigError(
      'admin.read_token_file',
      'holds the same token as admin.token_file (a read-only token must differ from the one that may change things)',
    );
  return {
    sessionKey: createHash('sha256')
      .update('feedsync admin sessions\0')
      .update(write)
      .update(read ?? Buffer.alloc(0))
      .digest(),
    roleOf(token) {
      if (token === '') return undefined;
      const presented = digest(token);
      // Both compared every time: which one matched takes no longer than a miss.
      const isWrite = timingSafeEqual(presented, write);
      const isRead = read !== undefined && timingSafeEqual(presented, read);
      return isWrite ? 'write' : isRead ? 'read' : undefined;
    },
  };
}

function readToken(file: string, key: string, dir: string): string {
  const absolute = resolve(dir, file);
  let text: string;
  try {
    text = readFileSync(absolute, 'utf8').trim();
  } catch (err) {
    throw new ConfigError(key, `cannot read ${absolute} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (text === '') throw new ConfigError(key, `${absolute} is empty`);
  return text;
}
