// One group: its timeline of episodes, its facts (current and superseded) and its entities,
// each with the corrections the token may make.

import { call, mayWrite } from '../api.js';
import { badge, clear, confirmDelete, errorBox, h, link, num, table, toast, when } from '../dom.js';
import { neighbourhood } from '../graph.js';
import { PAGE, factSources, timeline } from '../sources.js';

const TABS = [['timeline', 'Timeline'], ['facts', 'Facts'], ['entities', 'Entities']];
const state = { offset: 0, facts: 'all', name: '' };

export async function groupPage(root, group, tab, selected) {
  const base = '/group/' + encodeURIComponent(group);
  const body = h('section', { class: 'tab-body' });
  clear(root,
    h('h1', null, h('span', { class: 'muted' }, 'Group '), group),
    h('nav', { class: 'tabs' }, TABS.map(([id, label]) =>
      h('a', { href: '#' + base + '/' + id, class: id === tab ? 'active' : null }, label))),
    body);
  if (state.group !== group || state.tab !== tab) Object.assign(state, { group, tab, offset: 0 });
  if (tab === 'timeline') await timelineTab(body, group, selected);
  else if (tab === 'facts') await factsTab(body, group);
  else await entitiesTab(body, group, selected, base);
}

function pager(total, count, again) {
  const prev = h('button', { type: 'button', disabled: state.offset === 0 }, '← Newer');
  const next = h('button', { type: 'button', disabled: total !== null ? state.offset + count >= total : count < PAGE }, 'Older →');
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE); again(); });
  next.addEventListener('click', () => { state.offset += PAGE; again(); });
  const where = total === null ? '' : `${total ? state.offset + 1 : 0}–${state.offset + count} of ${total}`;
  return h('div', { class: 'pager' }, prev, h('span', null, where), next);
}

// --- timeline ---------------------------------------------------------------------------
async function timelineTab(body, group, selected) {
  const page = await timeline(group, state.offset);
  const again = () => timelineTab(body, group);
  const list = h('ol', { class: 'timeline' }, page.items.map((item) => timelineEntry(item, again)));
  clear(body, pager(page.total, page.items.length, again), list,
    page.items.length ? null : h('p', null, 'No episodes in this group.'));
  if (selected) {
    const entry = list.querySelector(`[data-uuid="${selected}"]`);
    if (entry) entry.querySelector('button.open').click();
  }
}

function timelineEntry(item, again) {
  const detail = h('div', { class: 'detail' });
  const open = h('button', { type: 'button', class: 'open' }, 'Open');
  open.addEventListener('click', async () => {
    if (detail.childElementCount) { detail.replaceChildren(); open.textContent = 'Open'; return; }
    open.textContent = 'Close';
    showEpisode(detail, item.uuid, again).catch((error) => clear(detail, errorBox(error)));
  });
  return h('li', { class: 'entry ' + item.kind, 'data-uuid': item.uuid },
    h('div', { class: 'meta' },
      h('time', null, when(item.time)), ' ',
      item.status ? badge(item.status) : badge(item.kind, 'kind'), ' ',
      item.source ? h('span', { class: 'muted' }, item.source) : null),
    h('h3', null, item.title),
    h('p', { class: 'preview' }, item.text, item.more ? '…' : ''),
    h('div', { class: 'row' }, item.counts ? h('span', { class: 'muted' }, item.counts) : null,
      item.kind === 'episode' ? open : null),
    detail);
}

async function showEpisode(detail, uuid, again) {
  detail.append(h('p', { class: 'muted' }, 'Loading…'));
  const whole = await call('get_episode', { uuid });
  const ep = whole.episode;
  const remove = mayWrite('delete_episode') ? h('button', { type: 'button', class: 'danger' }, 'Delete episode') : null;
  remove?.addEventListener('click', async () => {
    const yes = await confirmDelete('Delete this episode?',
      `Episode “${ep.name}” (${ep.uuid}) of group ${ep.group_id} goes, with its ${whole.passages.length} passages and the entities and facts only it supports. This cannot be undone.`);
    if (!yes) return;
    try {
      const done = await call('delete_episode', { uuid: ep.uuid });
      toast(`${done.message}: ${done.facts_removed} facts, ${done.entities_removed} entities, ${done.passages_removed} passages removed`);
      again();
    } catch (error) { toast(error.message, 'bad'); }
  });
  clear(detail,
    h('dl', { class: 'facts-of' },
      h('dt', null, 'uuid'), h('dd', null, h('code', null, ep.uuid)),
      h('dt', null, 'happened'), h('dd', null, when(ep.reference_time)),
      h('dt', null, 'stored'), h('dd', null, when(ep.created_at)),
      h('dt', null, 'status'), h('dd', null, ep.status, ep.status_detail ? ' — ' + ep.status_detail : '')),
    h('h4', null, 'Body'), h('pre', { class: 'body' }, ep.body),
    h('h4', null, `Passages (${whole.passages.length})`),
    h('ol', { class: 'passages' }, whole.passages.map((p) =>
      h('li', null, p.speaker ? h('b', null, p.speaker + ': ') : null, p.text))),
    whole.entities.length ? h('p', null, 'Mentions: ', whole.entities.map((e, i) => [i ? ', ' : '',
      link('/group/' + encodeURIComponent(ep.group_id) + '/entities/' + e.uuid, e.name)])) : null,
    remove);
}

// --- facts ------------------------------------------------------------------------------
async function factsTab(body, group) {
  const again = () => factsTab(body, group);
  const page = await call('list_facts', { group_id: group, state: state.facts, limit: PAGE, offset: state.offset });
  const pick = h('select', { 'aria-label': 'which facts' },
    ['all', 'current', 'superseded'].map((v) => h('option', { value: v, selected: v === state.facts }, v)));
  pick.addEventListener('change', () => { state.facts = pick.value; state.offset = 0; again(); });
  clear(body, h('div', { class: 'row' }, h('label', null, 'Show ', pick, ' facts')),
    pager(page.total, page.facts.length, again),
    page.facts.length ? table(['fact', 'between', 'valid', 'from episode', ''],
      page.facts.map((f) => factRow(f, again)), { class: 'facts' }) : h('p', null, 'No facts here.'));
}

export function factRow(f, again) {
  const sources = h('div', { class: 'sources' });
  const show = h('button', { type: 'button', class: 'link' }, 'sources');
  show.addEventListener('click', async () => {
    if (sources.childElementCount) { sources.replaceChildren(); return; }
    try {
      const found = await factSources(f);
      clear(sources, found.length ? found.map((src) => h('div', { class: 'source' },
        h('div', { class: 'muted' }, when(src.reference_time), ' · ', src.episode_name || src.episode_uuid),
        src.passages.map((text) => h('blockquote', null, text)))) : h('p', { class: 'muted' }, 'Imported: no episode.'));
    } catch (error) { sources.append(errorBox(error)); }
  });
  const remove = mayWrite('delete_entity_edge') ? h('button', { type: 'button', class: 'danger small' }, 'Delete') : null;
  remove?.addEventListener('click', async () => {
    const yes = await confirmDelete('Delete this fact?',
      `The fact “${f.fact}” (${f.relation}, ${f.uuid}) goes. Its entities and episodes stay. This cannot be undone.`);
    if (!yes) return;
    try { toast((await call('delete_entity_edge', { uuid: f.uuid })).message); again(); } catch (error) { toast(error.message, 'bad'); }
  });
  return h('tr', { class: f.superseded ? 'superseded' : null, 'data-uuid': f.uuid },
    h('td', null, h('div', null, f.fact), f.superseded ? badge('superseded') : null, ' ', h('span', { class: 'muted' }, f.relation), sources),
    h('td', null, f.source_name, ' → ', f.target_name),
    h('td', null, when(f.valid_at), ' – ', f.invalid_at ? when(f.invalid_at) : 'now'),
    h('td', null, f.episode_name || (f.episode_uuid ? f.episode_uuid.slice(0, 8) : 'imported'), ' ', show),
    h('td', null, remove));
}

// --- entities ---------------------------------------------------------------------------
async function entitiesTab(body, group, selected, base) {
  const again = () => entitiesTab(body, group, selected, base);
  const filter = h('input', { type: 'search', value: state.name, placeholder: 'name contains…', 'aria-label': 'filter entities by name' });
  filter.addEventListener('change', () => { state.name = filter.value; state.offset = 0; again(); });
  const page = await call('list_entities', { group_id: group, name_contains: state.name || null, limit: PAGE, offset: state.offset });
  const panel = h('section', { class: 'entity-panel' });
  const rows = page.entities.map((e) => h('tr', { class: e.uuid === selected ? 'chosen' : null },
    h('td', null, link(base + '/entities/' + e.uuid, e.name)),
    h('td', null, e.entity_type), h('td', { class: 'summary' }, e.summary),
    h('td', { class: 'n' }, e.fact_count)));
  clear(body, h('div', { class: 'split' },
    h('div', null, h('div', { class: 'row' }, filter), pager(page.total, page.entities.length, again),
      table(['entity', 'type', 'summary', 'facts'], rows, { class: 'entities' })),
    panel));
  if (selected) await entityPanel(panel, selected, base, again);
  else panel.append(h('p', { class: 'muted' }, 'Choose an entity to see its neighbourhood.'));
}

async function entityPanel(panel, uuid, base, again) {
  const found = await call('get_entity', { uuid, max_facts: 50 });
  const e = found.entity;
  const remove = mayWrite('delete_entity') ? h('button', { type: 'button', class: 'danger' }, 'Delete entity') : null;
  remove?.addEventListener('click', async () => {
    const yes = await confirmDelete('Delete this entity?',
      `Entity “${e.name}” (${e.entity_type}, ${e.uuid}) goes, with the ${found.facts.length} facts that touch it. The episodes that mention it stay. This cannot be undone.`);
    if (!yes) return;
    try {
      const done = await call('delete_entity', { uuid: e.uuid });
      toast(`${done.message}; ${done.facts_removed} facts removed`);
      location.hash = '#' + base + '/entities';
    } catch (error) { toast(error.message, 'bad'); }
  });
  clear(panel,
    h('h2', null, e.name, ' ', h('span', { class: 'muted' }, e.entity_type)),
    h('p', { class: 'summary' }, e.summary || 'No summary.'),
    h('p', { class: 'muted' }, `${e.lifecycle_state} · importance ${e.importance} · decay ${num(e.decay_score, 2)}`),
    neighbourhood(e, found.facts, (other) => { location.hash = '#' + base + '/entities/' + other; }),
    h('h3', null, `Facts (${found.facts.length})`),
    h('ul', { class: 'entity-facts' }, found.facts.map((f) =>
      h('li', { class: f.superseded ? 'superseded' : null }, f.fact, f.superseded ? [' ', badge('superseded')] : null))),
    h('h3', null, 'Mentioned in'),
    found.episodes.length ? h('ul', null, found.episodes.map((ep) => h('li', null, when(ep.reference_time), ' ',
      link(base + '/timeline/' + ep.uuid, ep.name)))) : h('p', { class: 'muted' }, 'No episode mentions it (imported).'),
    remove);
}
