// feedsync loads undici's Pool and Client by their module paths, skipping undici's index (start-up
// time): they must stay the very classes undici exports, whatever undici version is installed.
// Same for the proxy dispatchers, loaded by path on first use.
import {
  Client as IndexClient,
  EnvHttpProxyAgent as IndexEnvHttpProxyAgent,
  Pool as IndexPool,
  ProxyAgent as IndexProxyAgent,
} from 'undici';
import { describe, expect, it } from 'vitest';
import { Client, loadProxyClasses, Pool } from '../../src/upstream/undici-dispatchers.js';

describe('undici dispatchers loaded by path', () => {
  it('are the classes undici exports', () => {
    expect(Pool).toBe(IndexPool);
    expect(Client).toBe(IndexClient);
  });

  it('the proxy classes too, and the proxy client has the connect() CONNECT tunnels use', async () => {
    const { ProxyAgent, EnvHttpProxyAgent, proxyClient } = await loadProxyClasses();
    expect(ProxyAgent).toBe(IndexProxyAgent);
    expect(EnvHttpProxyAgent).toBe(IndexEnvHttpProxyAgent);
    const client = proxyClient(new URL('http://127.0.0.1:1'), {});
    try {
      expect(client).toBeInstanceOf(IndexPool);
      expect((client as IndexPool).connect).toBe(IndexPool.prototype.connect);
    } finally {
      await client.close();
    }
  });
});
