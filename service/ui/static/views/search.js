// Search: one box over search_memory; each result with its kind, score, score parts and the
// source it came from.

import { call } from '../api.js';
import { badge, clear, errorBox, h, link, num, when } from '../dom.js';
import { factSources } from '../sources.js';

let last = { query: '', group: '' };

export async function searchPage(root) {
  const { groups } = await call('get_group_stats', {});
  const input = h('input', { type: 'search', id: 'q', value: last.query, placeholder: 'What does it know about…', 'aria-label': 'search the memory', required: true });
  const scope = h('select', { 'aria-label': 'group' }, h('option', { value: '' }, 'every group'),
    groups.map((g) => h('option', { value: g.group_id, selected: g.group_id === last.group }, g.group_id)));
  const results = h('section', { class: 'results' });
  const form = h('form', { class: 'search', role: 'search' }, input, scope, h('button', { type: 'submit' }, 'Search'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    last = { query: input.value, group: scope.value };
    run(results).catch((error) => clear(results, errorBox(error)));
  });
  clear(root, h('h1', null, 'Search'),
    h('p', { class: 'muted' }, 'Facts and passages in one list, ranked by one score (search_memory, no LLM).'),
    form, results);
  input.focus();
  if (last.query) await run(results);
}

async function run(results) {
  clear(results, h('p', { class: 'muted' }, 'Searching…'));
  const args = { query: last.query, max_results: 20 };
  if (last.group) args.group_ids = [last.group];
  const answer = await call('search_memory', args);
  clear(results, h('p', { class: 'muted' }, answer.message, answer.groups ? ' in ' + answer.groups.join(', ') : ''),
    h('ol', { class: 'hits' }, answer.results.map(hit)));
}

function hit(r) {
  const parts = r.score_parts || {};
  const group = '/group/' + encodeURIComponent(r.group_id);
  const text = r.kind === 'fact' ? r.fact : r.text;
  const source = h('div', { class: 'source' });
  if (r.kind === 'passage') {
    source.append('from ', link(group + '/timeline/' + r.episode_uuid, r.episode_name || r.episode_uuid),
      ' · passage ', String(r.position), ' · ', when(r.reference_time));
  } else {
    const more = h('button', { type: 'button', class: 'link' }, 'show sources');
    const quotes = h('div');
    more.addEventListener('click', async () => {
      try {
        const found = await factSources(r);
        clear(quotes, found.length ? found.map((src) => h('div', null, h('div', { class: 'muted' },
          when(src.reference_time), ' · ', link(group + '/timeline/' + src.episode_uuid, src.episode_name || src.episode_uuid)),
          src.passages.map((p) => h('blockquote', null, p)))) : h('p', { class: 'muted' }, 'Imported: no episode.'));
      } catch (error) { quotes.append(errorBox(error)); }
    });
    source.append(r.source_node_name || '', ' → ', r.target_node_name || '', ' · ', r.relation, ' · valid ',
      when(r.valid_at), ' – ', r.invalid_at ? when(r.invalid_at) : 'now', ' ', more, quotes);
  }
  return h('li', { class: 'hit ' + r.kind },
    h('div', { class: 'meta' }, badge(r.kind, 'kind'), ' ', h('b', { class: 'score' }, num(r.score)), ' ',
      h('span', { class: 'parts' }, Object.entries(parts).map(([k, v]) => h('span', { class: 'part' }, `${k} ${num(v, 2)}`))),
      ' ', h('span', { class: 'muted' }, r.group_id)),
    h('p', { class: 'text' }, text), source);
}

