// The service's tools, called exactly as any REST client calls them: POST /tools/<name> with
// the JSON arguments and the bearer token in the Authorization header. The token lives in this
// tab's sessionStorage only (never in a URL, never in a cookie).

const KEY = 'workbench.ui.token';

export const session = {
  token: sessionStorage.getItem(KEY) || '',
  info: null,            // GET /ui/session: token name, admin, read_only, groups
  tools: new Map(),      // GET /tools: what this service offers
};

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

async function request(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (session.token) headers.Authorization = 'Bearer ' + session.token;
  const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.type || 'http_' + response.status,
      error.message || response.statusText || 'request failed');
  }
  return data;
}

export async function load() {
  session.info = await request('GET', '/ui/session');
  const table = await request('GET', '/tools');
  session.tools = new Map(table.tools.map((tool) => [tool.name, tool]));
}

export async function signIn(token) {
  session.token = token.trim();
  try {
    await load();
  } catch (error) {
    session.token = '';
    throw error;
  }
  sessionStorage.setItem(KEY, session.token);
}

export function signOut() {
  session.token = '';
  session.info = null;
  session.tools = new Map();
  sessionStorage.removeItem(KEY);
}

export function has(name) {
  return session.tools.has(name);
}

// whether the service offers a tool that takes every one of these arguments
export function takes(name, args) {
  const tool = session.tools.get(name);
  const props = (tool && tool.input_schema && tool.input_schema.properties) || {};
  return Boolean(tool) && args.every((arg) => arg in props);
}

// whether this token may call a tool that writes (the server checks again on every call)
export function mayWrite(name) {
  const tool = session.tools.get(name);
  return Boolean(tool && session.info && !session.info.read_only && !tool.read_only);
}

export function call(name, args = {}) {
  return request('POST', '/tools/' + encodeURIComponent(name), args);
}
