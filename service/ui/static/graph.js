// A small neighbourhood graph drawn as SVG: the entity in the middle, the entities its facts
// reach on a circle around it, each edge labelled with its relation. Names go in as text.

import { s } from './dom.js';

const SIZE = 420;
const MAX = 16;

export function neighbourhood(center, facts, onOpen) {
  const mid = SIZE / 2;
  const radius = SIZE / 2 - 60;
  const others = new Map();
  for (const f of facts) {
    const outgoing = f.source_uuid === center.uuid;
    const uuid = outgoing ? f.target_uuid : f.source_uuid;
    const name = outgoing ? f.target_name : f.source_name;
    if (uuid === center.uuid || others.size >= MAX && !others.has(uuid)) continue;
    const entry = others.get(uuid) || { uuid, name: name || uuid.slice(0, 8), relations: [] };
    entry.relations.push({ relation: f.relation, superseded: f.superseded });
    others.set(uuid, entry);
  }
  const svg = s('svg', {
    class: 'graph', viewBox: `0 0 ${SIZE} ${SIZE}`, role: 'img',
    'aria-label': `${center.name} and ${others.size} related entities`,
  });
  const nodes = [...others.values()];
  nodes.forEach((node, i) => {
    const angle = (2 * Math.PI * i) / Math.max(nodes.length, 1) - Math.PI / 2;
    node.x = mid + radius * Math.cos(angle);
    node.y = mid + radius * Math.sin(angle);
    const old = node.relations.every((r) => r.superseded);
    svg.append(s('line', { x1: mid, y1: mid, x2: node.x, y2: node.y, class: old ? 'edge old' : 'edge' }));
    const label = node.relations.map((r) => r.relation).join(', ');
    svg.append(s('text', { x: (mid + node.x) / 2, y: (mid + node.y) / 2 - 4, class: 'edge-label' }, short(label, 22)));
  });
  for (const node of nodes) {
    const g = s('g', { class: 'node', tabindex: 0, role: 'link' },
      s('title', null, node.name),
      s('circle', { cx: node.x, cy: node.y, r: 9 }),
      s('text', { x: node.x, y: node.y + 24, class: 'node-label' }, short(node.name, 18)));
    const open = () => onOpen(node.uuid);
    g.addEventListener('click', open);
    g.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
    svg.append(g);
  }
  svg.append(s('g', { class: 'node center' },
    s('title', null, center.name),
    s('circle', { cx: mid, cy: mid, r: 14 }),
    s('text', { x: mid, y: mid + 32, class: 'node-label' }, short(center.name, 24))));
  return svg;
}

function short(text, max) {
  const value = String(text ?? '');
  return value.length > max ? value.slice(0, max - 1) + '…' : value;
}
