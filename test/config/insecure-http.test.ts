// Plain http with credentials (issue #28 item 5): a source whose base_url or allowed origin is
// http:// off loopback is a configuration error unless it says allow_insecure_http: true; loopback
// (127.0.0.0/8, ::1, localhost) is allowed, since nothing crosses a network there.
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../src/config/load.js';
import { configError, minimalRaw } from './helpers.js';

const validate = (raw: unknown) => validateConfig(raw, { dir: '/' });

describe('plain http with credentials', () => {
  it.each([
    'http://scheduling.example.com/scheduling',
    'http://10.0.0.7:8080',
    'http://[fd00::1]:8080/s',
    'http://127.0.0.1.nip.io/s',
    'http://localhost.example.com/s',
    'http://[::ffff:127.0.0.1]/s',
  ])('refuses base_url %s, naming the key and the fix', (url) => {
    const raw = minimalRaw();
    raw.sources.push({ ...raw.sources[0], name: 'second', base_url: url });
    const err = configError(() => validate(raw));
    expect(err.path).toBe('sources[1].base_url');
    const origin = new URL(url).origin;
    expect(err.message).toBe(
      `sources[1].base_url: ${origin} is plain http off loopback: the Digest exchange and every response ` +
        'would cross the network readable and alterable; use https://, or set ' +
        'sources[1].allow_insecure_http: true if the network to it is trusted',
    );
  });

  it('refuses an http allowed origin off loopback too (the credentials go there as well)', () => {
    const raw = minimalRaw();
    raw.sources[0].allowed_origins = ['http://127.0.0.2:81', 'http://cdn.example.com:8080'];
    const err = configError(() => validate(raw));
    expect(err.path).toBe('sources[0].allowed_origins[1]');
    expect(err.message).toContain('http://cdn.example.com:8080 is plain http off loopback');
    expect(err.message).not.toContain('allowed_origins[0]');
  });

  it.each([
    'http://127.0.0.1:4010/scheduling',
    'http://127.255.0.9/s',
    'http://[::1]:4010/s',
    'http://localhost:4010/s',
    'http://LOCALHOST./s',
    'https://scheduling.example.com/s',
  ])('accepts %s without allow_insecure_http', (url) => {
    const raw = minimalRaw();
    raw.sources[0].base_url = url;
    expect(validate(raw).sources[0]!.allow_insecure_http).toBe(false);
  });

  it('accepts plain http off loopback when the source allows it', () => {
    const raw = minimalRaw();
    raw.sources[0].base_url = 'http://scheduling.internal:8080/s';
    raw.sources[0].allowed_origins = ['http://cdn.internal'];
    raw.sources[0].allow_insecure_http = true;
    expect(validate(raw).sources[0]).toMatchObject({
      base_url: 'http://scheduling.internal:8080/s',
      allowed_origins: ['http://cdn.internal'],
      allow_insecure_http: true,
    });
  });
});

describe('Digest strength keys', () => {
  it('default to every form the dialects list, and take the stricter settings', () => {
    const raw = minimalRaw();
    expect(validate(raw).sources[0]).toMatchObject({ digest_min: 'md5', require_qop: false });
    raw.sources[0].digest_min = 'sha-256';
    raw.sources[0].require_qop = true;
    expect(validate(raw).sources[0]).toMatchObject({ digest_min: 'sha-256', require_qop: true });
  });

  it.each([
    ['digest_min', 'SHA-256'],
    ['digest_min', 'sha-512'],
    ['require_qop', 'yes'],
  ])('refuses %s: %j', (key, value) => {
    const raw = minimalRaw();
    raw.sources[0][key] = value;
    expect(configError(() => validate(raw)).path).toBe(`sources[0].${key}`);
  });
});
