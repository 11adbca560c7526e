// Where the page reads a group's timeline and a fact's sources. The service may offer
// get_timeline and get_sources; when it lists them (GET /tools) with the arguments sent here
// they are used, otherwise the page falls back to list_episodes and to the one episode each
// fact names (so a service with other versions of them still shows both).

import { call, takes } from './api.js';

export const PAGE = 25;

// A page of the timeline: { total, offset, items: [{ kind, time, title, text, status,
// source, uuid }] }, latest first. kind "episode" items can be opened whole (get_episode).
export async function timeline(group, offset) {
  if (takes('get_timeline', ['group_ids', 'limit', 'offset'])) {
    const answer = await call('get_timeline', { group_ids: [group], limit: PAGE, offset });
    const items = (answer.items || answer.events || answer.timeline || []).map(timelineItem);
    return { total: answer.total ?? null, offset, items };
  }
  const page = await call('list_episodes', { group_id: group, limit: PAGE, offset });
  return {
    total: page.total,
    offset,
    items: page.episodes.map((e) => ({
      kind: 'episode', time: e.reference_time, title: e.name, text: e.preview,
      more: e.body_chars > e.preview.length, status: e.status, detail: e.status_detail,
      source: e.source + (e.source_description ? ' · ' + e.source_description : ''),
      uuid: e.uuid, counts: e.entity_count + ' entities, ' + e.fact_count + ' facts',
    })),
  };
}

function timelineItem(item) {
  const kind = item.kind || item.type || 'episode';
  return {
    kind,
    time: item.time || item.reference_time || item.valid_at || item.invalid_at || item.at,
    title: item.name || item.episode_name || item.relation || kind,
    text: item.fact || item.text || item.preview || item.body || '',
    status: item.status, source: item.source, uuid: item.uuid || item.episode_uuid,
  };
}

// The sources of a fact: [{ episode_uuid, episode_name, reference_time, passages: [text] }].
export async function factSources(fact) {
  if (takes('get_sources', ['uuid'])) {
    const answer = await call('get_sources', { uuid: fact.uuid });
    const said = answer.sources || {};
    return (Array.isArray(said) ? said : said.episodes || []).map((src) => ({
      episode_uuid: src.episode_uuid, episode_name: src.episode_name || src.name,
      reference_time: src.reference_time,
      passages: (src.passages || (src.text ? [src] : [])).map((p) => p.text ?? String(p)),
    }));
  }
  const uuids = fact.episodes || (fact.episode_uuid ? [fact.episode_uuid] : []);
  const found = [];
  for (const uuid of uuids.slice(0, 5)) {
    const whole = await call('get_episode', { uuid });
    found.push({
      episode_uuid: uuid, episode_name: whole.episode.name,
      reference_time: whole.episode.reference_time,
      passages: whole.passages.map((p) => p.text),
    });
  }
  return found;
}
