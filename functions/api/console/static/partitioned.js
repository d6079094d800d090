// Partitioned queues: partitions, consumer groups and lag, counters, dead letters and their replay.
// The API has no list of partitioned queues, so the console remembers the names opened here.
'use strict';
import { historyPanel } from './charts.js';
import { api, cards, enc, fmt, h, json, showError, table } from './lib.js';

const KNOWN = 'postbox.partitioned';
export const knownQueues = () => JSON.parse(localStorage.getItem(KNOWN) || '[]');
function remember(name) {
  localStorage.setItem(KNOWN, JSON.stringify([name, ...knownQueues().filter((n) => n !== name)].slice(0, 20)));
}

function picker() {
  const input = h('input', { id: 'pq-name', placeholder: 'queue name', required: true });
  const form = h('form', { class: 'inline' }, input, h('button', { type: 'submit' }, 'Open'));
  form.addEventListener('submit', (e) => { e.preventDefault(); location.hash = `#/partitioned/${enc(input.value.trim())}`; });
  const known = knownQueues();
  return h('div', {}, form, known.length ? h('p', { class: 'muted' }, 'Opened before: ',
    known.map((n) => [h('a', { href: `#/partitioned/${enc(n)}` }, n), ' '])) : null);
}

export async function partitionedPage(main, signal, name) {
  if (!name) {
    main.replaceChildren(h('h1', {}, 'Partitioned queues'), picker());
    return;
  }
  const res = await api('GET', `/api/v1/resources/queues/${enc(name)}`, undefined, { signal });
  remember(name);
  const rows = res.partitions.flatMap((p) => (p.consumerGroups.length ? p.consumerGroups : [null]).map((g) => ({ p, g })));
  const groupLink = (r) => {
    if (!r.g) return '—';
    if (r.g.name.startsWith('streams.')) {
      return h('a', { href: `#/flows/${enc(r.g.name.slice(8))}/${enc(r.p.partitionId)}` }, r.g.name);
    }
    return r.g.name;
  };
  const note = h('div');
  const dead = h('div', { id: 'pq-dead' });
  const history = historyPanel(`/api/v1/resources/queues/${enc(name)}/history`, signal);
  async function showDead() {
    const d = await api('GET', `/api/v1/dlq?queue=${enc(name)}&limit=100`, undefined, { signal });
    dead.replaceChildren(table(d.messages, [
      { label: 'id', get: (m) => String(m.id) },
      { label: 'Partition', get: (m) => m.partition || '' },
      { label: 'Group', get: (m) => m.consumerGroup || '' },
      { label: 'Error', get: (m) => m.errorMessage || m.error || '' },
      { label: 'Payload', get: (m) => json(m.data ?? m.payload) },
      { label: '', get: (m) => h('button', { class: 'small', onclick: async () => {
        try { await api('POST', '/api/v1/dlq/replay', { ids: [String(m.id)] }); note.replaceChildren(h('p', { class: 'ok' }, `Replayed ${m.id}.`)); }
        catch (e) { showError(note, e); }
        await showDead();
      } }, 'Replay') },
    ], { empty: 'No dead letters.' }));
  }
  main.replaceChildren(
    h('h1', {}, h('a', { href: '#/partitioned' }, 'Partitioned queues'), ' / ', name),
    cards(Object.entries(res.counters || {}).map(([k, v]) => [k, fmt(v)])),
    history.panel,
    h('h2', {}, 'Partitions and consumer groups'),
    table(rows, [
      { label: 'Partition', get: (r) => r.p.name },
      { label: 'partitionId', get: (r) => r.p.partitionId },
      { label: 'Next offset', num: true, get: (r) => fmt(r.p.nextOffset) },
      { label: 'Consumer group', get: groupLink },
      { label: 'Committed', num: true, get: (r) => fmt(r.g?.committedOffset) },
      { label: 'Lag', num: true, get: (r) => fmt(r.g?.lag) },
      { label: 'Leased', get: (r) => (r.g?.leased ? h('span', { class: 'badge live' }, 'leased') : '') },
    ], { empty: 'No partitions yet.', id: 'partition-table' }),
    h('h2', {}, 'Options'), json(res.options, true),
    h('h2', {}, 'Dead letters'), note, dead);
  await Promise.all([showDead(), history.load()]);
}
