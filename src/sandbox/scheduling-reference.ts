// The scheduling service's reference resources (rules, licensors, requirements, credit roles,
// linear channels): served by GET and pointed to by links, never the subject of an event.
// Also the service root.
import type { Rng } from './prng.js';
import { code, instant, phrase } from './text-pool.js';
import type { World } from './world.js';
import type { Resource } from '../core/resource.js';

/** Reference resources (never event subjects) that links of generated resources point to. */
export function seedSchedulingStatics(world: World, rng: Rng, startMs: number): void {
  const add = (path: string, res: Resource) =>
    world.statics.set(path, { ...res, self_link: world.url(path) });
  for (let i = 1; i <= 8; i++) {
    const id = i * 3;
    add(`/api/rules/${id}`, {
      resource_type: 'rule',
      id,
      external_id: code(rng, 'RULE'),
      transmission_type: 'rerun',
      reference_tx_nth: 'all',
      reference_tx_from: instant(rng, startMs, 30),
      reference_tx_to: instant(rng, startMs + 60 * 86_400_000, 30),
      day_part_from: null,
      day_part_to: null,
      start_offset_value: rng.int(0, 3),
      end_offset_value: rng.int(7, 30),
      start_offset_unit: 'days',
      end_offset_unit: 'days',
      start_offset_reference: 'after_tx_starts',
      end_offset_reference: 'after_tx_ends',
      start_fixed_time: null,
      end_fixed_time: null,
      asset_selection_type: null,
    });
    const rule = world.statics.get(`/api/rules/${id}`) as Resource;
    Object.assign(rule, {
      content_link: world.url(`/api/rules/${id}/content`),
      specific_platforms_link: world.url(`/api/rules/${id}/specific_platforms`),
      reference_tx_channel_link: world.url(`/api/linear_channels/${(i % 3) + 1}`),
    });
  }
  for (let id = 1; id <= 5; id++) {
    add(`/api/licensors/${id}`, { resource_type: 'licensor', id, name: phrase(rng, 'Licensor ') });
    (world.statics.get(`/api/licensors/${id}`) as Resource).titles_link = world.url(
      `/api/licensors/${id}/titles`,
    );
  }
  for (let id = 1; id <= 12; id++)
    add(`/api/requirements/${id}`, { resource_type: 'requirement', id, name: phrase(rng) });
  for (let id = 1; id <= 4; id++) {
    add(`/api/credit_roles/${id}`, {
      resource_type: 'credit_role',
      id,
      name: ['actor', 'director', 'writer', 'producer'][id - 1] as string,
      admits_character_name: id === 1,
    });
  }
  for (let id = 1; id <= 3; id++)
    add(`/api/linear_channels/${id}`, { resource_type: 'linear_channel', id, name: phrase(rng) });
}

/** Links of the scheduling root (spec, Root). */
export function schedulingRoot(base: string): Resource {
  const root: Resource = { resource_type: 'catalog' };
  const collections = ['titles', 'title_groups', 'brands', 'platforms', 'licensors', 'events', 'outlets'];
  collections.push('linear_channels', 'deals', 'images', 'assets', 'requirements', 'contributors');
  collections.push('credit_roles', 'renditions', 'rights', 'denied_rights', 'rules', 'blackouts');
  for (const c of collections) root[`${c}_link`] = `${base}/api/${c}`;
  root.schedulings_link = `${base}/api/schedule/schedulings`;
  root.enumerations_link = `${base}/api/enumerations`;
  return root;
}
