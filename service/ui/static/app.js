// The memory browser: sign in (when tokens are in use), then the pages of #/... routes.

import { ApiError, load, session, signIn, signOut } from './api.js';
import { clear, errorBox, h, link } from './dom.js';
import { groupsPage } from './views/groups.js';
import { groupPage } from './views/group.js';
import { healthPage } from './views/health.js';
import { searchPage } from './views/search.js';

const main = () => document.getElementById('main');

const ROUTES = [
  [/^\/$/, () => groupsPage(main())],
  [/^\/group\/([^/]+)(?:\/(timeline|facts|entities))?(?:\/([0-9a-f-]{36}))?$/,
    (m) => groupPage(main(), decodeURIComponent(m[1]), m[2] || 'timeline', m[3])],
  [/^\/search$/, () => searchPage(main())],
  [/^\/health$/, () => healthPage(main())],
];

function header() {
  clear(document.getElementById('nav'),
    link('/', 'Groups'), link('/search', 'Search'), link('/health', 'Health'));
  const who = document.getElementById('who');
  const info = session.info;
  if (!info) { clear(who); return; }
  const name = info.token === null ? 'local (no token in use)' : 'token ' + info.token;
  const scope = info.read_only ? 'read-only' : info.admin ? 'admin' : 'read-write';
  clear(who, h('span', { class: 'who-name' }, name), ' · ', h('span', { class: 'scope' }, scope),
    info.token === null ? null : h('button', { type: 'button', class: 'link', onclick: () => { signOut(); route(); } }, 'Sign out'));
}

function signInPage(problem) {
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true, placeholder: 'wbt_…', 'aria-label': 'bearer token' });
  const form = h('form', { class: 'signin', id: 'signin' },
    h('h1', null, 'Sign in'),
    h('p', null, 'This service uses API tokens. Paste yours (SVC_KNOWLEDGE_API_TOKEN, or one made with `workbench tokens add`). It stays in this tab only.'),
    input, h('button', { type: 'submit' }, 'Sign in'),
    problem ? errorBox(problem) : null);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await signIn(input.value);
      route();
    } catch (error) {
      signInPage(error.status === 401 ? new Error('That token is not valid here.') : error);
    }
  });
  clear(main(), form);
  header();
  input.focus();
}

export async function route() {
  if (!session.info) {
    try {
      await load();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) { signInPage(session.token ? error : null); return; }
      clear(main(), errorBox(error));
      return;
    }
  }
  header();
  const path = (location.hash || '#/').slice(1).split('?')[0];
  for (const [pattern, show] of ROUTES) {
    const match = path.match(pattern);
    if (match) {
      try {
        await show(match);
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) { signOut(); signInPage(error); return; }
        main().append(errorBox(error));
      }
      return;
    }
  }
  clear(main(), h('p', null, 'No such page. '), link('/', 'Back to the groups'));
}

window.addEventListener('hashchange', route);
route();
