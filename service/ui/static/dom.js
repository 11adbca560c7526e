// Building the page: every value goes in as text (textContent / text nodes), never as markup.
// Links only ever point inside the page (#/...) so a value cannot become a javascript: URL.

const SVG = 'http://www.w3.org/2000/svg';

function put(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function attrs(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.setAttribute('class', value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'href' && !/^#/.test(String(value))) throw new Error('links stay in the page');
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  return el;
}

export function h(tag, props, ...children) {
  return put(attrs(document.createElement(tag), props), children);
}

export function s(tag, props, ...children) {
  return put(attrs(document.createElementNS(SVG, tag), props), children);
}

export function clear(el, ...children) {
  el.replaceChildren();
  return put(el, children);
}

export function link(path, ...children) {
  return h('a', { href: '#' + path }, ...children);
}

export function when(value) {
  if (!value) return '—';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? String(value) : d.toISOString().replace('T', ' ').slice(0, 16) + 'Z';
}

export function num(value, digits = 3) {
  return typeof value === 'number' ? value.toFixed(digits) : '—';
}

export function badge(text, kind) {
  return h('span', { class: 'badge ' + (kind || String(text).toLowerCase()) }, text);
}

export function table(head, rows, props) {
  return h('table', props,
    h('thead', null, h('tr', null, head.map((cell) => h('th', null, cell)))),
    h('tbody', null, rows));
}

let toastTimer = 0;
export function toast(message, kind = 'ok') {
  const el = document.getElementById('toast');
  el.textContent = message;
  el.className = 'toast ' + kind;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 6000);
}

export function errorBox(error) {
  const kind = error && error.type ? ' (' + error.type + ')' : '';
  return h('p', { class: 'error', role: 'alert' }, String(error && error.message || error) + kind);
}

// A confirmation that names what goes; resolves true only on the explicit button.
export function confirmDelete(title, text) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  return new Promise((resolve) => {
    const yes = () => dialog.close('ok');
    const no = () => dialog.close('cancel');
    ok.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('close', () => {
      ok.removeEventListener('click', yes);
      cancel.removeEventListener('click', no);
      resolve(dialog.returnValue === 'ok');
    }, { once: true });
    dialog.returnValue = 'cancel';
    dialog.showModal();
    cancel.focus();
  });
}
