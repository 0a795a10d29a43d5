import { describe, expect, it } from 'vitest';
import { parseConfig, validateConfig } from '../../src/config/load.js';
import { configError, minimalRaw } from './helpers.js';

const DIR = '/etc/feedsync';
const validate = (raw: unknown) => validateConfig(raw, { dir: DIR });
/** The ConfigError's message lines for `raw`. */
const problems = (raw: unknown) => configError(() => validate(raw)).message.split('\n');

describe('defaults', () => {
  it('fills every default from the schema', () => {
    const raw = minimalRaw();
    raw.sinks.push({ name: 'hook', type: 'webhook', url: 'https://example.test/h' });
    raw.sinks.push({ name: 'mine', type: 'module', module: './sinks/mine.js' });
    const config = validate(raw);
    expect(config.shutdown_timeout_ms).toBe(10000);
    expect(config.store).toEqual({ path: './data/feedsync.db' });
    expect(config.queue).toEqual({
      driver: 'local',
      prefix: 'feedsync',
      attempts: 10,
      backoff_ms: 1000,
      max_backoff_ms: 300000,
      concurrency: 4,
      max_backlog: 1_000_000,
      retain_completed_ms: 86400000,
      retain_completed_count: 10000,
      shards: 8,
      lease_ttl_ms: 15000,
      allow_volatile_redis: false,
      min_replicas_acked: 0,
      delivery_timeout_ms: 60000,
    });
    // Redis memory is dearer than local disk: a smaller default bound per sink with bullmq.
    expect(
      validate({ ...raw, queue: { driver: 'bullmq', redis_url: 'redis://127.0.0.1:6379' } }).queue
        .max_backlog,
    ).toBe(100_000);
    expect(config.sources[0]).toEqual({
      name: 'sched',
      service: 'scheduling',
      base_url: 'http://127.0.0.1:4010/scheduling',
      username: 'alice',
      password: 'wonderland',
      format: 'json',
      event_types: [],
      expand_subject: true,
      expand_source: true,
      start_from: 'latest',
      poll_interval_ms: 5000,
      timeout_ms: 30000,
      subject_concurrency: 8,
      compression: true,
      max_body_bytes: 8 * 1024 * 1024,
      max_page_bytes: 16 * 1024 * 1024,
      max_change_bytes: 8 * 1024 * 1024,
      on_undecodable_subject: 'stop',
      allowed_origins: [],
      allow_insecure_http: false,
      digest_min: 'md5',
      require_qop: false,
    });
    const noFilter = { sources: [], services: [], event_types: [], resource_types: [] };
    expect(config.sinks).toEqual([
      { name: 'file', type: 'jsonl', path: './out.jsonl', filter: noFilter },
      { name: 'hook', type: 'webhook', url: 'https://example.test/h', timeout_ms: 10000, filter: noFilter },
      { name: 'mine', type: 'module', module: '/etc/feedsync/sinks/mine.js', options: {}, filter: noFilter },
    ]);
    expect(config.http).toEqual({ host: '0.0.0.0', port: 9464 });
    expect(config.log).toEqual({ level: 'info' });
  });

  it('defaults each filter list on its own', () => {
    const raw = minimalRaw();
    raw.sinks[0].filter = { event_types: ['title_updated'] };
    expect(validate(raw).sinks[0]!.filter).toEqual({
      sources: [],
      services: [],
      event_types: ['title_updated'],
      resource_types: [],
    });
  });

  it('keeps store and sink paths as written but makes module paths absolute', () => {
    const raw = minimalRaw();
    raw.store = { path: 'rel/db.sqlite' };
    raw.sinks.push({ name: 'm', type: 'sqlite', path: '../mirror.db' });
    raw.sinks.push({ name: 'abs', type: 'module', module: '/opt/sink.js', options: { a: 1 } });
    raw.sinks.push({ name: 'url', type: 'module', module: 'file:///opt/url-sink.js' });
    const config = validate(raw);
    expect(config.store.path).toBe('rel/db.sqlite');
    expect(config.sinks[1]).toMatchObject({ path: '../mirror.db' });
    expect(config.sinks[2]).toMatchObject({ module: '/opt/sink.js', options: { a: 1 } });
    expect(config.sinks[3]).toMatchObject({ module: '/opt/url-sink.js' });
  });

  it('resolves a module path against the config file directory given to parseConfig', () => {
    const yaml = `
sources: [{ name: s, service: workflow, base_url: "http://127.0.0.1:1/w/", username: u, password: p }]
sinks: [{ name: m, type: module, module: ../sinks/x.js }]
`;
    const { config, dir } = parseConfig(yaml, { dir: '/srv/app/config' });
    expect(dir).toBe('/srv/app/config');
    expect(config.sinks[0]).toMatchObject({ module: '/srv/app/sinks/x.js' });
    // Trailing slashes of base_url are stripped; expand_source on workflow is accepted.
    expect(config.sources[0]).toMatchObject({ base_url: 'http://127.0.0.1:1/w', expand_source: true });
  });
});

describe('start_from', () => {
  it.each([
    ['latest', 'latest'],
    ['earliest', 'earliest'],
    [0, 0],
    [123457, 123457],
    ['123457', 123457],
  ])('accepts %j', (input, expected) => {
    const raw = minimalRaw();
    raw.sources[0].start_from = input;
    expect(validate(raw).sources[0]!.start_from).toBe(expected);
  });

  it.each([-1, 1.5, '12a', 'LATEST', '', true, null, 2 ** 60, '99999999999999999999'])(
    'rejects %j',
    (input) => {
      const raw = minimalRaw();
      raw.sources[0].start_from = input;
      const err = configError(() => validate(raw));
      expect(err.path).toBe('sources[0].start_from');
      expect(err.message).toContain('must be latest, earliest or a non-negative integer event id');
    },
  );
});

describe('per-sink position keys', () => {
  it('takes a sink start_from (earliest or an id) and max_backlog; a sink has neither by default', () => {
    const raw = minimalRaw();
    expect(validate(raw).sinks[0]).not.toHaveProperty('start_from');
    raw.sinks[0].start_from = '41230';
    raw.sinks[0].max_backlog = 300;
    expect(validate(raw).sinks[0]).toMatchObject({ start_from: 41230, max_backlog: 300 });
    raw.sinks[0].start_from = 'earliest';
    expect(validate(raw).sinks[0]).toMatchObject({ start_from: 'earliest' });
  });

  it.each([
    ['start_from', 'latest', 'must be earliest or a non-negative integer event id'],
    ['start_from', -3, 'must be earliest or a non-negative integer event id'],
    ['max_backlog', 0, ''],
  ])('rejects sinks[0].%s = %j naming the key', (key, value, message) => {
    const raw = minimalRaw();
    raw.sinks[0][key] = value;
    const err = configError(() => validate(raw));
    expect(err.path).toBe(`sinks[0].${key}`);
    expect(err.message).toContain(message);
  });
});

describe('rejections name the key path', () => {
  it('unknown keys at several depths, all reported at once', () => {
    const raw = minimalRaw();
    raw.extra = 1;
    raw.queue = { driver: 'local', concurency: 2 };
    raw.sources[0].pasword = 'x';
    raw.sinks[0].filter = { source: ['sched'] };
    expect(problems(raw)).toEqual([
      'queue.concurency: unknown key',
      'sources[0].pasword: unknown key',
      'sinks[0].filter.source: unknown key',
      'extra: unknown key',
    ]);
  });

  it('wrong types and integers', () => {
    const raw = minimalRaw();
    raw.shutdown_timeout_ms = '10s';
    raw.queue = { attempts: 0, concurrency: 2.5, backoff_ms: -1 };
    raw.http = { port: 70000 };
    raw.sources[0].expand_subject = 'yes';
    raw.sources[0].format = 'csv';
    raw.sources[0].service = 'billing';
    raw.log = { level: 'verbose' };
    expect(problems(raw)).toEqual([
      'shutdown_timeout_ms: must be a number, got a string',
      'queue.attempts: must be >= 1',
      'queue.backoff_ms: must be >= 0',
      'queue.concurrency: must be an integer, got a fraction',
      'sources[0].service: must be one of: scheduling, workflow',
      'sources[0].format: must be one of: json, xml',
      'sources[0].expand_subject: must be a boolean, got a string',
      'http.port: must be <= 65535',
      'log.level: must be one of: fatal, error, warn, info, debug, trace, silent',
    ]);
  });

  it('requires sources, sinks and credentials', () => {
    expect(problems({ sources: [], sinks: [] })).toEqual([
      'sources: at least one source is required',
      'sinks: at least one sink is required',
    ]);
    expect(problems({})).toEqual(['sources: required', 'sinks: required']);
    const raw = minimalRaw();
    delete raw.sources[0].username;
    delete raw.sources[0].password;
    expect(problems(raw)).toEqual([
      'sources[0].username: required',
      'sources[0].password: required (or password_file)',
    ]);
  });

  it('rejects a document that is not a mapping', () => {
    expect(configError(() => validate(null)).message).toContain('the configuration is empty');
    expect(configError(() => validate(['a'])).message).toBe(
      'the configuration must be a mapping, got a list',
    );
    expect(configError(() => parseConfig('just text', { dir: DIR })).message).toContain('must be a mapping');
  });

  it('duplicate source and sink names', () => {
    const raw = minimalRaw();
    raw.sources.push({ ...raw.sources[0], service: 'workflow' });
    raw.sinks.push(
      { name: 'other', type: 'sqlite', path: 'a.db' },
      { name: 'file', type: 'sqlite', path: 'b.db' },
    );
    expect(problems(raw)).toEqual([
      'sources[1].name: duplicate source name "sched" (also sources[0].name)',
      'sinks[2].name: duplicate sink name "file" (also sinks[0].name)',
    ]);
  });

  it.each(['has:colon', '-leading', '', 'spa ce', 'ünï'])('rejects the name %j', (name) => {
    const raw = minimalRaw();
    raw.sources[0].name = name;
    raw.sinks[0].name = name;
    expect(problems(raw)).toEqual([
      'sources[0].name: must start with a letter or digit and contain only letters, digits, _ . -',
      'sinks[0].name: must start with a letter or digit and contain only letters, digits, _ . -',
    ]);
  });

  it('bad URLs', () => {
    const raw = minimalRaw();
    raw.sources.push(
      { ...raw.sources[0], name: 'b', base_url: 'ftp://127.0.0.1/x' },
      { ...raw.sources[0], name: 'c', base_url: 'not a url' },
      { ...raw.sources[0], name: 'd', base_url: 'http://127.0.0.1/x?y=1' },
      { ...raw.sources[0], name: 'e', base_url: 'http://u:pw@127.0.0.1/x' },
    );
    raw.sinks.push({ name: 'hook', type: 'webhook', url: 'mailto:someone@example.test' });
    const lines = problems(raw);
    expect(lines).toEqual([
      'sources[1].base_url: must be an http(s) URL',
      'sources[2].base_url: must be an http(s) URL',
      'sources[3].base_url: must not have a query or fragment (the feed is {base_url}/api/events)',
      'sources[4].base_url: must not contain credentials (use username and password)',
      'sinks[1].url: must be an http(s) URL',
    ]);
    expect(lines.join('\n')).not.toContain(':pw@');
  });

  it('unknown or missing sink type', () => {
    const raw = minimalRaw();
    raw.sinks.push({ name: 'k', type: 'kafka' }, { name: 'n' }, { name: 'x', type: 'jsonl' });
    expect(problems(raw)).toEqual([
      'sinks[1].type: unknown sink type "kafka" (known: jsonl, webhook, sqlite, postgres, module)',
      'sinks[2].type: required (known sink types: jsonl, webhook, sqlite, postgres, module)',
      'sinks[3].path: required',
    ]);
  });

  it('keys of another sink type are unknown keys', () => {
    const raw = minimalRaw();
    raw.sinks[0].url = 'http://127.0.0.1/';
    raw.sinks[0].secret_file = '/x';
    expect(problems(raw)).toEqual(['sinks[0].url: unknown key', 'sinks[0].secret_file: unknown key']);
  });

  it('bullmq without redis_url, bad redis URLs never echoed', () => {
    const raw = minimalRaw();
    raw.queue = { driver: 'bullmq' };
    expect(problems(raw)).toEqual(['queue.redis_url: required when queue.driver is bullmq']);
    raw.queue.redis_url = 'http://:hunter2@127.0.0.1:6379';
    const lines = problems(raw);
    expect(lines).toEqual([
      'queue.redis_url: must be a redis:// or rediss:// URL, or redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>] or redis+cluster://[user:password@]host:port[,host:port…] (rediss+… for TLS)',
    ]);
    raw.queue.redis_url = 'rediss://:hunter2@127.0.0.1:6379/0';
    expect(validate(raw).queue).toMatchObject({
      driver: 'bullmq',
      redis_url: 'rediss://:hunter2@127.0.0.1:6379/0',
    });
  });

  it('max_backoff_ms below backoff_ms', () => {
    const raw = minimalRaw();
    raw.queue = { backoff_ms: 5000, max_backoff_ms: 1000 };
    expect(problems(raw)).toEqual(['queue.max_backoff_ms: must be >= queue.backoff_ms (5000)']);
  });

  it('the page budget covers a body and a change: each limit named when it does not', () => {
    const raw = minimalRaw();
    const source = (raw.sources as Record<string, unknown>[])[0]!;
    Object.assign(source, {
      max_body_bytes: 20_000_000,
      max_page_bytes: 16_777_216,
      max_change_bytes: 30_000_000,
    });
    expect(problems(raw)).toEqual([
      'sources[0].max_page_bytes: must be >= max_body_bytes (20000000): every subject fetch may reserve max_body_bytes of it',
      'sources[0].max_change_bytes: must be <= max_page_bytes (16777216)',
    ]);
    Object.assign(source, {
      max_body_bytes: 1_048_576,
      max_page_bytes: 4_194_304,
      max_change_bytes: 2_097_152,
    });
    expect(validate(raw).sources[0]).toMatchObject({
      max_page_bytes: 4_194_304,
      max_change_bytes: 2_097_152,
    });
    Object.assign(source, { on_undecodable_subject: 'skip' });
    expect(problems(raw)[0]).toMatch(/^sources\[0\]\.on_undecodable_subject: /);
  });

  it('filters: unknown source names and services', () => {
    const raw = minimalRaw();
    raw.sinks[0].filter = { sources: ['sched', 'shed'], services: ['workflow', 'billing'] };
    expect(problems(raw)).toEqual([
      'sinks[0].filter.services[1]: must be one of: scheduling, workflow',
      'sinks[0].filter.sources[1]: unknown source "shed" (known: sched)',
    ]);
  });

  it('the first problem is the error path; the message lists every problem', () => {
    const raw = minimalRaw();
    raw.sources[0].base_url = 'nope';
    raw.http = { port: -1 };
    const err = configError(() => validate(raw));
    expect(err.path).toBe('sources[0].base_url');
    expect(err.message).toBe('sources[0].base_url: must be an http(s) URL\nhttp.port: must be >= 0');
  });
});

describe('YAML problems', () => {
  it('syntax errors give line and column but never the offending text', () => {
    const yaml = 'sources:\n  - name: a\n    password: s3cret: oops\n';
    const err = configError(() => parseConfig(yaml, { file: '/etc/f.yaml', dir: DIR }));
    expect(err.message).toMatch(/^invalid YAML in \/etc\/f\.yaml: .*line 3, column \d+/);
    expect(err.message).not.toContain('s3cret');
  });

  it('duplicate keys and several documents are errors', () => {
    expect(configError(() => parseConfig('a: 1\na: 2\n', { dir: DIR })).message).toContain('unique');
    expect(configError(() => parseConfig('a: 1\n---\nb: 2\n', { dir: DIR })).message).toContain(
      'multiple documents',
    );
  });

  it('excessive aliases (a billion laughs) are a ConfigError, not a hang', () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++) {
      const prev = String.fromCharCode(97 + i);
      const next = String.fromCharCode(98 + i);
      lines.push(`${next}: &${next} [${Array(10).fill(`*${prev}`).join(', ')}]`);
    }
    const err = configError(() => parseConfig(lines.join('\n'), { dir: DIR }));
    expect(err.message).toContain('invalid YAML');
  });

  it('non-JSON YAML values are type errors', () => {
    const yaml = `${'sources: []'}\nsinks: !!set { a }\nstore: { path: !!binary aGVsbG8= }\n`;
    expect(configError(() => parseConfig(yaml, { dir: DIR })).message.split('\n')).toEqual([
      'store.path: must be a string, got binary data',
      'sources: at least one source is required',
      'sinks: must be a list, got a YAML set/map',
    ]);
  });
});
