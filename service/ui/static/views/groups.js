// Groups: what each group holds, its queue and its last activity.

import { call } from '../api.js';
import { clear, h, link, num, table, when } from '../dom.js';

export async function groupsPage(root) {
  clear(root, h('h1', null, 'Groups'), h('p', { class: 'muted' }, 'Loading…'));
  const { groups } = await call('get_group_stats', {});
  const rows = groups.map((g) => h('tr', null,
    h('td', null, link('/group/' + encodeURIComponent(g.group_id), g.group_id)),
    h('td', { class: 'n' }, g.episodes),
    h('td', { class: 'n' }, g.entities),
    h('td', { class: 'n' }, `${g.facts_current} / ${g.facts}`),
    h('td', { class: 'n' }, g.passages),
    h('td', null, queue(g.queue)),
    h('td', null, when(g.last_activity)),
    h('td', { class: 'n' }, '$' + num(g.llm_cost_today_usd, 4))));
  clear(root,
    h('h1', null, 'Groups'),
    h('p', { class: 'muted' }, 'What the memory holds, per group (namespace) this token may use. Open one to read, check and correct it.'),
    groups.length
      ? table(['group', 'episodes', 'entities', 'facts (current / all)', 'passages', 'queue', 'last activity', 'LLM today'], rows, { class: 'groups' })
      : h('p', null, 'Nothing stored yet: add a memory (add_memory) or import facts (workbench import).'));
}

export function queue(q) {
  const parts = ['queued', 'processing', 'failed'].filter((k) => q[k]).map((k) => `${q[k]} ${k}`);
  return parts.length ? parts.join(', ') : `idle (${q.done} done)`;
}
