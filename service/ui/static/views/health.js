// Health: decay states and the figures of /health/decay (the same answer as the tool
// get_knowledge_health), the LLM cost of today per group, and the extraction queue.

import { call } from '../api.js';
import { clear, h, num, table, when } from '../dom.js';
import { queue } from './groups.js';

export async function healthPage(root) {
  clear(root, h('h1', null, 'Health'), h('p', { class: 'muted' }, 'Loading…'));
  const [decay, stats, q] = await Promise.all([
    call('get_knowledge_health'), call('get_group_stats', {}), call('get_queue_status'),
  ]);
  clear(root, h('h1', null, 'Health'),
    h('section', null, h('h2', null, 'Decay'), decayPart(decay)),
    h('section', null, h('h2', null, 'LLM cost today (UTC)'),
      table(['group', 'USD', 'queue'], stats.groups.map((g) => h('tr', null,
        h('td', null, g.group_id), h('td', { class: 'n' }, '$' + num(g.llm_cost_today_usd, 4)),
        h('td', null, queue(g.queue)))), { class: 'costs' })),
    h('section', null, h('h2', null, 'Extraction queue'), queuePart(q)));
}

function decayPart(d) {
  const states = d.memories_by_state || d.states || {};
  const last = d.last_maintenance || {};
  const figures = Object.entries(d).filter(([, v]) => typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean');
  return [
    h('dl', { class: 'figures' }, figures.map(([k, v]) => [h('dt', null, k.replaceAll('_', ' ')), h('dd', null, typeof v === 'number' && !Number.isInteger(v) ? num(v, 3) : String(v))])),
    h('h3', null, 'Memories by lifecycle state'),
    table(['state', 'memories'], Object.entries(states).map(([k, v]) => h('tr', null, h('td', null, k), h('td', { class: 'n' }, typeof v === 'object' ? JSON.stringify(v) : v))), { class: 'states' }),
    h('h3', null, 'Last maintenance run'),
    Object.keys(last).length ? h('dl', { class: 'figures' }, Object.entries(last).map(([k, v]) =>
      [h('dt', null, k.replaceAll('_', ' ')), h('dd', null, /_at$/.test(k) ? when(v) : typeof v === 'object' ? JSON.stringify(v) : String(v))])) : h('p', { class: 'muted' }, 'None yet.'),
  ];
}

function queuePart(q) {
  return [
    h('p', null, `${q.counts.queued} queued, ${q.counts.processing} processing, ${q.counts.done} done, ${q.counts.failed} failed · ${q.workers} workers · oldest waiting ${num(q.oldest_waiting_seconds, 0)} s · LLM ${q.llm_configured ? 'configured' : 'not configured (episodes wait)'}`),
    q.failed.length ? table(['episode', 'group', 'error', 'when'], q.failed.map((f) => h('tr', null,
      h('td', null, f.name || f.episode_uuid), h('td', null, f.group_id),
      h('td', null, (f.error_type || '') + ': ' + (f.error_message || '')), h('td', null, when(f.finished_at)))), { class: 'failed' }) : null,
  ];
}
