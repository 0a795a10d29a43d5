// feedsync loads undici's Pool and Client by their module paths, skipping undici's index (start-up
// time): they must stay the very classes undici exports, whatever undici version is installed.
import { Client as IndexClient, Pool as IndexPool } from 'undici';
import { describe, expect, it } from 'vitest';
import { Client, Pool } from '../../src/upstream/undici-dispatchers.js';

describe('undici dispatchers loaded by path', () => {
  it('are the classes undici exports', () => {
    expect(Pool).toBe(IndexPool);
    expect(Client).toBe(IndexClient);
  });
});
