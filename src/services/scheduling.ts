import type { Resource } from '../core/resource.js';
import { eventTypes, type ServiceAdapter } from './adapter.js';

const ALL = ['created', 'updated', 'deleted'];

export const schedulingAdapter: ServiceAdapter = {
  kind: 'scheduling',
  // The spec's "Supported event types" table.
  knownEventTypes: eventTypes([
    [
      ['asset', 'audio_track', 'brand', 'contributor', 'deal', 'image', 'rendition', 'right', 'scheduling'],
      [...ALL, 'metadata_updated'],
    ],
    [
      ['subtitle', 'title', 'title_group'],
      [...ALL, 'metadata_updated'],
    ],
    [['availability_window', 'credit', 'granted_requirement', 'platform', 'specific_platform'], ALL],
    [['external_id', 'external_id_type', 'linear_program', 'linear_program_group', 'target_platform'], ALL],
    [['publication'], ['created']],
  ]),
  feedParams(source): Record<string, string> {
    const expand = [source.expand_subject && 'subject', source.expand_source && 'source'].filter(Boolean);
    return expand.length ? { expand: expand.join(',') } : {};
  },
  // Ordered by id: the 50 smallest ids above the cursor, so the largest one is the next cursor.
  maxDisorder: 0,
  // "a scheduling's asset link has the XML rel assets"
  linkRel: (resourceType, rel) => (resourceType === 'scheduling' && rel === 'assets' ? 'asset' : rel),
  normalizeSubject(subject: Resource): Resource {
    if (subject.resource_type !== 'scheduling' || !('assets_link' in subject)) return subject;
    const { assets_link, assets, ...rest } = subject;
    const renamed: Resource = { ...rest, asset_link: assets_link };
    if (assets !== undefined) renamed.asset = assets;
    return renamed;
  },
};
