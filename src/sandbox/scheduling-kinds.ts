// The scheduling service's resource types: every resource of the spec's event-type table, with the
// fields and links the spec shows (and a plausible minimal shape where it shows none).
import type { FieldGen, KindDef, LinkGen, Operation } from './kind.js';
import { code, instant, phrase, tagList } from './text-pool.js';

const FULL: readonly Operation[] = ['created', 'updated', 'deleted', 'metadata_updated'];
const CUD: readonly Operation[] = ['created', 'updated', 'deleted'];

/** Types whose embedded subject carries external_id (spec, Events rule 2). */
export const EMBED_EXTERNAL_ID_TYPES = new Set([
  'brand',
  'contributor',
  'deal',
  'image',
  'platform',
  'rendition',
  'scheduling',
  'title',
]);

/** The scheduling's asset link is rel `assets` in XML (spec, Scheduling). */
export const SCHEDULING_REL_ALIASES = { scheduling: { asset: 'assets' } };

export const PLURALS: Record<string, string> = {
  asset: 'assets',
  audio_track: 'audio_tracks',
  brand: 'brands',
  contributor: 'contributors',
  deal: 'deals',
  image: 'images',
  rendition: 'renditions',
  right: 'rights',
  scheduling: 'schedulings',
  subtitle: 'subtitles',
  title: 'titles',
  title_group: 'title_groups',
  availability_window: 'availability_windows',
  credit: 'credits',
  granted_requirement: 'granted_requirements',
  platform: 'platforms',
  specific_platform: 'specific_platforms',
  external_id: 'external_ids',
  external_id_type: 'external_id_types',
  linear_program: 'linear_programs',
  linear_program_group: 'linear_program_groups',
  target_platform: 'target_platforms',
  publication: 'publications',
};

const live =
  (type: string): LinkGen =>
  (c) => {
    const path = c.world.randomLive(type, c.rng);
    return path === undefined ? undefined : c.world.url(path);
  };
const ref =
  (collection: string): LinkGen =>
  (c) => {
    const path = c.world.randomStatic(`/api/${collection}/`, c.rng);
    return path === undefined ? undefined : c.world.url(path);
  };
const sub =
  (suffix: string): LinkGen =>
  (c) =>
    `${c.selfUrl}/${suffix}`;

const name: FieldGen = (c) => phrase(c.rng);
const extId =
  (prefix: string): FieldGen =>
  (c) =>
    code(c.rng, prefix);
const when: FieldGen = (c) => instant(c.rng, c.nowMs, 60);
const oneOf =
  (...values: string[]): FieldGen =>
  (c) =>
    c.rng.pick(values);
const int =
  (min: number, max: number): FieldGen =>
  (c) =>
    c.rng.int(min, max);
const nullable =
  (gen: FieldGen, p: number): FieldGen =>
  (c) =>
    c.rng.chance(p) ? null : gen(c);

const aclHash: FieldGen = (c) =>
  c.rng.chance(0.4)
    ? null
    : c.rng
        .sample(
          ['view@user#12', 'edit@team#3', 'view@everyone', 'publish@user#7', 'edit@user#44'],
          c.rng.int(1, 3),
        )
        .join(' ');

function kind(type: string, ops: readonly Operation[], rest: Omit<KindDef, 'type' | 'operations'>): KindDef {
  return { type, operations: ops, timestamps: true, ...rest };
}

export const SCHEDULING_KINDS: readonly KindDef[] = [
  kind('asset', FULL, {
    fields: {
      name,
      external_id: extId('A'),
      asset_type: oneOf('video', 'audio', 'trailer'),
      duration: int(30, 7200),
    },
    links: { metadata: sub('metadata'), renditions: sub('renditions') },
    updatable: ['name', 'external_id', 'asset_type', 'duration'],
  }),
  kind('audio_track', FULL, {
    fields: { name, language: oneOf('en', 'de', 'fr', 'es', 'ja') },
    links: { asset: live('asset'), metadata: sub('metadata') },
    updatable: ['name', 'language', 'asset'],
  }),
  kind('brand', FULL, {
    fields: { name, external_id: extId('B'), tags: (c) => tagList(c.rng), acl_hash: aclHash },
    links: {
      series: sub('series'),
      collections: sub('collections'),
      titles: sub('titles'),
      metadata: sub('metadata'),
      images: sub('images'),
      licensor: ref('licensors'),
      note: sub('note'),
      external_ids: sub('external_ids'),
    },
    updatable: ['name', 'external_id', 'tags', 'acl_hash', 'licensor'],
  }),
  kind('contributor', FULL, {
    fields: { name, external_id: extId('C') },
    links: { metadata: sub('metadata') },
    updatable: ['name', 'external_id'],
  }),
  kind('deal', FULL, {
    fields: { name, external_id: extId('D'), starts_at: when, ends_at: when },
    links: {
      licensor: ref('licensors'),
      specific_platforms: sub('specific_platforms'),
      metadata: sub('metadata'),
    },
    updatable: ['name', 'external_id', 'starts_at', 'ends_at', 'licensor'],
  }),
  kind('image', FULL, {
    fields: { name, external_id: extId('I'), width: int(320, 3840), height: int(240, 2160) },
    links: { target_platforms: sub('target_platforms'), metadata: sub('metadata') },
    updatable: ['name', 'external_id', 'width', 'height'],
  }),
  kind('rendition', FULL, {
    fields: { name, external_id: extId('R'), bitrate: int(500, 20000) },
    links: { asset: live('asset'), target_platforms: sub('target_platforms'), metadata: sub('metadata') },
    updatable: ['name', 'external_id', 'bitrate', 'asset'],
  }),
  kind('right', FULL, {
    fields: { name, starts_at: when, ends_at: when, exclusive: (c) => c.rng.chance(0.5) },
    links: {
      granted_requirements: sub('granted_requirements'),
      specific_platforms: sub('specific_platforms'),
      metadata: sub('metadata'),
    },
    updatable: ['name', 'starts_at', 'ends_at', 'exclusive'],
  }),
  kind('scheduling', FULL, {
    fields: { put_up: when, take_down: when, scheduling_type: () => 'catchup', external_id: extId('S') },
    links: {
      title_group: live('title_group'),
      title: live('title'),
      asset: live('asset'),
      publications: sub('publications'),
    },
    updatable: ['put_up', 'take_down', 'external_id', 'title', 'title_group', 'asset'],
  }),
  kind('subtitle', FULL, {
    fields: { name, language: oneOf('en', 'de', 'fr', 'es', 'ja') },
    links: { asset: live('asset'), metadata: sub('metadata') },
    updatable: ['name', 'language', 'asset'],
  }),
  kind('title', FULL, {
    fields: {
      name,
      external_id: extId('T'),
      title_type: oneOf('episode', 'movie', 'special'),
      note_text: nullable((c) => phrase(c.rng, 'Note: '), 0.5),
    },
    links: {
      schedule: sub('schedule'),
      series: live('title_group'),
      licensor: ref('licensors'),
      metadata: sub('metadata'),
      note: sub('note'),
    },
    updatable: ['name', 'external_id', 'title_type', 'note_text', 'series', 'licensor'],
  }),
  kind('title_group', FULL, {
    fields: {
      name,
      external_id: extId('G'),
      title_group_type: oneOf('series', 'collection'),
      season_number: int(1, 12),
      season_reference_id: extId('SR'),
    },
    links: { titles: sub('titles'), schedule: sub('schedule'), metadata: sub('metadata') },
    updatable: ['name', 'external_id', 'title_group_type', 'season_number', 'season_reference_id'],
  }),
  kind('availability_window', CUD, {
    fields: { name, starts_at: when, ends_at: when },
    links: { platform: live('platform') },
    updatable: ['name', 'starts_at', 'ends_at', 'platform'],
  }),
  kind('credit', CUD, {
    fields: { character_name: nullable(name, 0.3), position: int(1, 40) },
    links: { contributor: live('contributor'), credit_role: ref('credit_roles'), title: live('title') },
    updatable: ['character_name', 'position', 'credit_role'],
  }),
  kind('granted_requirement', CUD, {
    fields: {},
    links: { requirement: ref('requirements') },
    updatable: ['requirement'],
  }),
  kind('platform', CUD, {
    fields: { name, external_id: extId('P') },
    links: { schedule: sub('schedule') },
    updatable: ['name', 'external_id'],
  }),
  kind('specific_platform', CUD, {
    fields: {},
    links: { platform: live('platform') },
    updatable: ['platform'],
  }),
  kind('external_id', CUD, {
    fields: { value: extId('X') },
    links: { external_id_type: live('external_id_type'), external_identifiable: live('title') },
    updatable: ['value', 'external_id_type'],
  }),
  kind('external_id_type', CUD, {
    fields: { name, keyword: (c) => code(c.rng, 'kw').toLowerCase() },
    links: {},
    updatable: ['name', 'keyword'],
  }),
  kind('linear_program', CUD, {
    fields: { name, starts_at: when, ends_at: when },
    links: { linear_program_group: live('linear_program_group'), channel: ref('linear_channels') },
    updatable: ['name', 'starts_at', 'ends_at', 'channel'],
  }),
  kind('linear_program_group', CUD, {
    fields: { name },
    links: {},
    updatable: ['name'],
  }),
  kind('target_platform', CUD, {
    hasId: false,
    fields: {},
    links: { platform: live('platform') },
    updatable: ['platform'],
  }),
  kind('publication', ['created'], {
    fields: { success: (c) => c.rng.chance(0.8), published_at: (c) => new Date(c.nowMs).toISOString() },
    links: { scheduling: live('scheduling'), payload: sub('payload'), log: sub('log') },
    updatable: [],
  }),
];

export function schedulingPath(type: string, id: number): string {
  const plural = PLURALS[type];
  if (!plural) throw new RangeError(`scheduling: no collection for resource type ${type}`);
  return `/api/${plural}/${id}`;
}
