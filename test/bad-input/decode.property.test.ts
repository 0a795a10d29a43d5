// Properties: every form of docs/dialects.md, rendered from one generated model, decodes to the
// same normalized shape; and whatever body an upstream sends — real sandbox responses damaged in random ways, or
// noise — decodeBody returns a resource or collection or throws a DecodeError naming the URL (or, for a
// body over the decoder's limits or with a DOCTYPE that declares anything, the refusal that names
// it); nothing else. And readFeedEvents on whatever decodeBody returned gives one event per entry,
// a DecodeError or an invalid_event refusal.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DecodeError, UpstreamRefusedError } from '../../src/core/errors.js';
import { readFeedEvents } from '../../src/pipeline/feed-page.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/index.js';
import { services } from '../../src/services/index.js';
import { decodeBody } from '../../src/upstream/decode.js';
import { isNormalizedCollection, type Representation } from '../../src/core/resource.js';
import { DigestTestClient } from '../sandbox/digest-test-client.js';
import { Choices, expected, modelArb, renderJson, renderXml } from './support/dialect-space.js';
import { mutatedBodyArb, type Format } from './support/mutate.js';

// Replay a failure with FEEDSYNC_BAD_INPUT_SEED=<seed printed in the failure>.
const SEED = Number(process.env.FEEDSYNC_BAD_INPUT_SEED ?? Math.floor(Math.random() * 2 ** 31));
const params = (numRuns: number) => ({ seed: SEED, numRuns });
const URL_FOR_ERRORS = 'http://127.0.0.1:9/scheduling/api/events?newer_than=1';

interface Sample {
  name: string;
  service: 'scheduling' | 'workflow';
  format: Format;
  contentType: string;
  body: string;
  feed: boolean;
}

let sandbox: Sandbox;
const samples: Sample[] = [];

beforeAll(async () => {
  sandbox = await startSandbox({ seed: 51, backlog: 60, rate: 0 });
  const client = new DigestTestClient(sandbox.username, sandbox.password);
  for (const service of ['scheduling', 'workflow'] as const) {
    const base = service === 'scheduling' ? sandbox.schedulingBaseUrl : sandbox.workflowBaseUrl;
    const feedQuery = service === 'scheduling' ? '?expand=subject,source' : '';
    const subject = Object.keys(sandbox.liveState(service))[0]!;
    for (const format of ['json', 'xml'] as const) {
      const accept = `application/${format}`;
      const get = async (url: string) => {
        const res = await client.get(url, { accept });
        if (res.status !== 200) throw new Error(`GET ${url}: HTTP ${res.status}`);
        return { body: await res.text(), contentType: res.headers.get('content-type') ?? '' };
      };
      for (const [name, url, feed] of [
        ['feed', `${base}/api/events${feedQuery}`, true],
        ['empty feed', `${base}/api/events?newer_than=99999999`, true],
        ['subject', subject, false],
      ] as const) {
        samples.push({ name: `${service} ${format} ${name}`, service, format, feed, ...(await get(url)) });
      }
    }
  }
});
afterAll(async () => {
  await sandbox?.close();
});

const outcomes = { decodeError: 0, resource: 0, events: 0, eventsError: 0 };

/** The contract of decodeBody (+ readFeedEvents for feeds) on one input. */
function checkOne(
  body: string,
  contentType: string | undefined,
  s: Pick<Sample, 'format' | 'service'>,
): void {
  let resource: Representation;
  try {
    resource = decodeBody(body, contentType, URL_FOR_ERRORS, s.format, {
      linkRel: services[s.service].linkRel,
    });
  } catch (err) {
    const refused =
      err instanceof UpstreamRefusedError && ['too_deep', 'too_many_values', 'doctype'].includes(err.reason);
    if (!(err instanceof DecodeError) && !refused)
      throw new Error(`not a DecodeError: ${String(err)}`, { cause: err });
    expect((err as Error).message).toContain(URL_FOR_ERRORS);
    outcomes.decodeError++;
    return;
  }
  // A resource names its type; a collection is recognised by its entries array.
  expect(isNormalizedCollection(resource) || typeof resource.resource_type === 'string').toBe(true);
  expect(() => JSON.stringify(resource)).not.toThrow();
  expect(Object.getPrototypeOf(resource)).toBe(Object.prototype);
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  outcomes.resource++;
  try {
    const events = readFeedEvents(resource, URL_FOR_ERRORS);
    // Never a silent skip: one event per listed entry.
    if (!isNormalizedCollection(resource)) throw new Error('readFeedEvents accepted a non-collection');
    expect(events).toHaveLength(resource.entries.length);
    for (const e of events) {
      expect(Number.isSafeInteger(e.id) && e.id >= 0).toBe(true);
      expect(e.event_type).toBe(e.event_type.trim());
      expect(e.event_type).not.toBe('');
      expect(new Date(e.timestamp).toISOString()).toBe(e.timestamp);
    }
    outcomes.events++;
  } catch (err) {
    // Not a collection: a DecodeError; an event feedsync cannot take: an invalid_event refusal.
    const invalidEvent = err instanceof UpstreamRefusedError && err.reason === 'invalid_event';
    if (!(err instanceof DecodeError) && !invalidEvent)
      throw new Error(`not a DecodeError or an invalid_event refusal: ${String(err)}`, { cause: err });
    expect((err as Error).message).toContain(URL_FOR_ERRORS);
    outcomes.eventsError++;
  }
}

describe(`decodeBody on damaged real responses (seed ${SEED}; replay: FEEDSYNC_BAD_INPUT_SEED=${SEED})`, () => {
  it('the undamaged samples decode (the property starts from working bodies)', () => {
    expect(samples).toHaveLength(12);
    for (const s of samples) {
      const r = decodeBody(s.body, s.contentType, URL_FOR_ERRORS, s.format, {
        linkRel: services[s.service].linkRel,
      });
      if (s.feed) expect(readFeedEvents(r, URL_FOR_ERRORS).length, s.name).toBeGreaterThanOrEqual(0);
      else expect(r.id, s.name).toBeTypeOf('number');
    }
  });

  it('mutated bodies give a Resource or a DecodeError, and feeds give every event or a DecodeError', () => {
    for (const s of samples) {
      fc.assert(
        fc.property(mutatedBodyArb(s.body, s.format), (body) => checkOne(body, s.contentType, s)),
        params(120),
      );
    }
    // The mutations reach every branch: bodies that still decode, and ones that do not.
    for (const [outcome, n] of Object.entries(outcomes)) expect(n, outcome).toBeGreaterThan(20);
  });

  it('with a random or wrong content type as well', () => {
    const contentTypes = fc.constantFrom(
      undefined,
      '',
      'text/html',
      'text/plain',
      'application/json',
      'application/xml; charset=utf-8',
      'application/problem+json',
      'application/octet-stream',
      ';;;',
    );
    for (const s of samples.filter((x) => x.feed)) {
      fc.assert(
        fc.property(mutatedBodyArb(s.body, s.format), contentTypes, (body, ct) => checkOne(body, ct, s)),
        params(60),
      );
    }
  });

  it('noise: arbitrary strings, JSON values and XML-ish fragments', () => {
    const xmlish = fc
      .array(
        fc.constantFrom(
          '<events type="array">',
          '<event>',
          '</event>',
          '<id type="integer">',
          '</id>',
          '7',
          'x',
          '<link rel="subject" href="h"/>',
          '</events>',
          '<?xml version="1.0"?>',
        ),
        { maxLength: 30 },
      )
      .map((parts) => parts.join(''));
    const body = fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), fc.json({ maxDepth: 4 }), xmlish);
    fc.assert(
      fc.property(
        body,
        fc.constantFrom<Format>('json', 'xml'),
        fc.constantFrom('scheduling', 'workflow' as const),
        (b, format, service) => checkOne(b, undefined, { format, service }),
      ),
      params(400),
    );
  });
});

describe(`XML and JSON renderings from the whole dialect space decode deep-equal (seed ${SEED})`, () => {
  const decode = (body: string, format: Format, contentType: string | undefined) =>
    decodeBody(body, contentType, URL_FOR_ERRORS, format);
  const JSON_TYPES = [
    undefined,
    'application/json',
    'application/json; charset=utf-8',
    'application/vnd.wf+json',
  ];
  const XML_TYPES = [
    undefined,
    'application/xml',
    'text/xml; charset=UTF-8',
    'application/xml;charset=utf-8',
  ];

  it('every rendering of a generated resource or collection decodes to the shape its model says', () => {
    let collections = 0;
    fc.assert(
      fc.property(modelArb, fc.integer(), fc.integer(), (model, xmlSeed, jsonSeed) => {
        const want = expected(model);
        const xml = new Choices(xmlSeed);
        const json = new Choices(jsonSeed);
        const fromXml = decode(renderXml(model, xml), 'xml', xml.pick(XML_TYPES));
        const fromJson = decode(renderJson(model, json), 'json', json.pick(JSON_TYPES));
        expect(fromXml).toStrictEqual(want);
        expect(fromJson).toStrictEqual(want);
        // Two other choices of forms for the same model: still the same.
        expect(decode(renderXml(model, new Choices(~xmlSeed)), 'xml', undefined)).toStrictEqual(fromXml);
        expect(decode(renderJson(model, new Choices(~jsonSeed)), 'json', undefined)).toStrictEqual(fromJson);
        if (model.kind === 'coll') collections++;
      }),
      params(400),
    );
    expect(collections).toBeGreaterThan(20);
  });
});
