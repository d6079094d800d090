// Keyed streams (list, subscriptions, recent messages) and durable streams (a live tail).
'use strict';
import { historyPanel } from './charts.js';
import { BASE, api, enc, fmt, h, json, session, table } from './lib.js';

export async function streamsPage(main, signal) {
  const { streams } = await api('GET', '/v1/streams', undefined, { signal });
  main.replaceChildren(h('h1', {}, 'Streams'), table(streams, [
    { label: 'Stream', get: (s) => h('a', { href: `#/streams/${enc(s.name)}?project=${enc(s.project)}` }, s.name) },
    { label: 'Project', get: (s) => s.project },
    { label: 'Messages', num: true, get: (s) => fmt(s.messages) },
    { label: 'Scheduled', num: true, get: (s) => fmt(s.scheduled) },
    { label: 'Active keys', num: true, get: (s) => fmt(s.active_keys) },
    { label: 'Subscriptions', get: (s) => (s.subscriptions || []).join(', ') },
  ], { empty: 'No keyed streams yet.', id: 'stream-table' }));
}

export async function streamPage(main, signal, spec) {
  const [name, query] = spec.split('?');
  const project = new URLSearchParams(query || '').get('project');
  const p = project ? `?project=${enc(project)}` : '';
  const base = `/v1/streams/${enc(name)}`;
  const [subs, recent] = await Promise.all([
    api('GET', `${base}/subscriptions${p}`, undefined, { signal }),
    api('GET', `${base}/messages${p}${p ? '&' : '?'}limit=50`, undefined, { signal }),
  ]);
  const history = historyPanel(`${base}/history${p}`, signal);
  main.replaceChildren(h('h1', {}, h('a', { href: '#/streams' }, 'Streams'), ' / ', name),
    history.panel,
    h('h2', {}, 'Subscriptions'),
    table(subs.subscriptions, [
      { label: 'Subscription', get: (s) => s.name },
      { label: 'Pending', num: true, get: (s) => fmt(s.pending) },
      { label: 'In flight', num: true, get: (s) => fmt(s.in_flight) },
      { label: 'Acked', num: true, get: (s) => fmt(s.acked) },
      { label: 'Dead', num: true, get: (s) => fmt(s.dead) },
      { label: 'Max deliveries', num: true, get: (s) => fmt(s.max_deliveries) },
    ], { empty: 'No subscriptions.', id: 'subscription-table' }),
    h('h2', {}, 'Recent messages'),
    table(recent.messages, [
      { label: 'Offset', num: true, get: (m) => String(m.offset) },
      { label: 'Key', get: (m) => m.key || '' },
      { label: 'Status', get: (m) => h('span', { class: 'badge' }, m.status) },
      { label: 'Published', get: (m) => m.published_at },
      { label: 'Payload', get: (m) => json(m.payload) },
    ], { empty: 'No messages.' }));
  await history.load();
}

// Durable streams: catch up from the start, then long-poll for appends until the page changes.
export async function durablePage(main, signal, name) {
  const input = h('input', { id: 'durable-name', placeholder: 'stream name', required: true, value: name || '' });
  const form = h('form', { class: 'inline' }, input, h('button', { type: 'submit' }, 'Tail'));
  form.addEventListener('submit', (e) => { e.preventDefault(); location.hash = `#/durable/${enc(input.value.trim())}`; });
  main.replaceChildren(h('h1', {}, 'Durable streams'), form);
  if (!name) {
    main.append(h('p', { class: 'muted' }, 'Name a durable stream to follow it live.'));
    return;
  }
  const status = h('p', { class: 'muted', id: 'tail-status' }, 'catching up…');
  const out = h('div', { class: 'tail', id: 'tail' });
  main.append(status, out);
  let offset = '-1', live = false, count = 0;
  while (!signal.aborted) {
    const url = `${BASE}/v1/stream/${enc(name)}?offset=${enc(offset)}${live ? '&live=long-poll' : ''}`;
    const r = await fetch(url, { headers: { apikey: session.key }, signal });
    if (r.status === 404) { status.replaceChildren(h('span', { class: 'error' }, `No durable stream named ${name}.`)); return; }
    if (!r.ok && r.status !== 204) throw new Error(`${r.status}: ${await r.text()}`);
    if (r.status === 200) {
      const text = await r.text();
      let items;
      try { const v = JSON.parse(text); items = Array.isArray(v) ? v : [v]; } catch { items = text ? [text] : []; }
      for (const item of items) {
        count += 1;
        out.append(h('div', {}, typeof item === 'string' ? item : JSON.stringify(item)));
      }
      out.scrollTop = out.scrollHeight;
    }
    offset = r.headers.get('Stream-Next-Offset') || offset;
    const closed = r.headers.get('Stream-Closed') === 'true';
    status.replaceChildren(h('span', { class: `badge ${closed ? '' : 'live'}` }, closed ? 'closed' : 'live'),
                           ` ${count} messages · next offset ${offset}`);
    if (closed) return;
    live = true;
  }
}
