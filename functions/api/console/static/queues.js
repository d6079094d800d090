// Queues: the list with depth, in flight, oldest age and depth over the last hour; one queue's
// history charts, messages by state, sending, and replaying dead letters.
'use strict';
import { historyPanel } from './charts.js';
import { age, api, cards, enc, every, fmt, h, json, showError, spark, table, when } from './lib.js';

const Q = '/api/v1/queues';
const MINUTE = 60_000;

export async function queuesPage(main, signal) {
  const body = h('div', { id: 'queues' });
  main.replaceChildren(h('h1', {}, 'Queues'), body,
    h('p', { class: 'muted' }, 'Depth, last hour: a point a minute, recorded by Postbox.'));
  const depths = new Map();  // queue name -> [time ms, depth] of its last hour, fetched once a minute
  let fetchedAt = 0;
  async function lastHours(queues) {
    if (Date.now() - fetchedAt < MINUTE) return;
    fetchedAt = Date.now();
    await Promise.all(queues.map((q) => api('GET', `${Q}/${enc(q.name)}/history?window=hour`, undefined, { signal })
      .then((d) => depths.set(q.name, d.t.map((t, i) => [t * 1000, d.depth[i]]))).catch(() => {})));
  }
  async function load() {
    const { queues } = await api('GET', Q, undefined, { signal });
    const [metrics] = await Promise.all([
      Promise.all(queues.map((q) => api('GET', `${Q}/${enc(q.name)}/metrics`, undefined, { signal }).catch(() => ({})))),
      lastHours(queues)]);
    const rows = queues.map((q, i) => ({ ...q, m: metrics[i], samples: depths.get(q.name) || [] }));
    body.replaceChildren(table(rows, [
      { label: 'Queue', get: (r) => h('a', { href: `#/queues/${enc(r.name)}`, class: 'queue-link' }, r.name) },
      { label: 'Depth', num: true, get: (r) => h('span', { class: 'depth', 'data-queue': r.name }, fmt(r.queue_length)) },
      { label: 'In flight', num: true, get: (r) => fmt(r.m.in_flight) },
      { label: 'Oldest', num: true, get: (r) => age(r.metrics?.oldest_msg_age_sec) },
      { label: 'Dead', num: true, get: (r) => fmt(r.dead_total) },
      { label: 'Depth, last hour', get: (r) => spark(r.samples) },
      { label: 'Dead-letter queue', get: (r) => r.dead_letter_queue || '' },
    ], { empty: 'No queues yet: create one with the API, the client or `postbox queues create NAME`.', id: 'queue-table' }));
  }
  await load();
  every(signal, load);
}

// Where a queue's dead letters are: its dead-letter queue's waiting messages, else its archive's dead.
function deadSource(queue) {
  return queue.dead_letter_queue ? { name: queue.dead_letter_queue, state: 'waiting' } : { name: queue.name, state: 'dead' };
}

async function deadLetters(queue, signal) {
  const src = deadSource(queue);
  const page = await api('GET', `${Q}/${enc(src.name)}/messages?state=${src.state}&limit=200`, undefined, { signal });
  return page.messages.filter((m) => src.state === 'dead' || m.dead_lettered);
}

// Replay: send the message back to its queue, then (from a dead-letter queue) delete it there.
async function replay(queue, message) {
  const src = deadSource(queue);
  await api('POST', `${Q}/${enc(queue.name)}/send`, { message: message.message, ...(message.headers ? { headers: message.headers } : {}) });
  if (src.name !== queue.name) await api('DELETE', `${Q}/${enc(src.name)}/messages/${message.msg_id}`);
}

export async function queuePage(main, signal, name) {
  const queue = await api('GET', `${Q}/${enc(name)}`, undefined, { signal });
  const stats = h('div', { id: 'stats' });
  const history = historyPanel(`${Q}/${enc(name)}/history`, signal);
  const list = h('div', { id: 'messages' });
  const note = h('div', { id: 'note' });
  let state = 'waiting';
  const tabs = h('div', { class: 'tabs' }, ['waiting', 'archived', 'dead'].map((s) =>
    h('button', { 'data-state': s, id: `tab-${s}`, onclick: () => { state = s; showMessages(); } }, s)));

  async function showStats() {
    const m = (await api('GET', `${Q}/${enc(name)}/metrics`, undefined, { signal }));
    stats.replaceChildren(cards([['depth', fmt(m.queue_length), 'stat-depth'], ['visible', fmt(m.visible)],
      ['in flight', fmt(m.in_flight)], ['delayed', fmt(m.delayed)], ['oldest', age(m.oldest_msg_age_sec)],
      ['archived', fmt(m.archived)], ['dead lettered', fmt(m.dead_lettered)]]));
  }

  async function showMessages() {
    for (const b of tabs.children) b.classList.toggle('active', b.dataset.state === state);
    const messages = state === 'dead' ? await deadLetters(queue, signal)
      : (await api('GET', `${Q}/${enc(name)}/messages?state=${state}&limit=100`, undefined, { signal })).messages;
    const columns = [
      { label: 'msg_id', num: true, get: (m) => String(m.msg_id) },
      { label: 'Reads', num: true, get: (m) => fmt(m.read_ct) },
      { label: 'Enqueued', get: (m) => when(m.enqueued_at) },
      { label: 'State', get: (m) => (m.dead_lettered ? h('span', { class: 'badge dead' }, 'dead')
        : m.in_flight ? h('span', { class: 'badge' }, 'in flight') : h('span', { class: 'badge' }, state)) },
      { label: 'Message', get: (m) => json(m.message) },
    ];
    if (state === 'dead') {
      columns.push({ label: '', get: (m) => h('button', { class: 'small replay', 'data-msg': m.msg_id, onclick: async () => {
        try { await replay(queue, m); note.replaceChildren(h('p', { class: 'ok' }, `Replayed message ${m.msg_id} into ${name}.`)); }
        catch (e) { showError(note, e); }
        await Promise.all([showStats(), showMessages()]);
      } }, 'Replay') });
    }
    const where = state === 'dead' && queue.dead_letter_queue ? ` (in ${queue.dead_letter_queue})` : '';
    list.replaceChildren(h('p', { class: 'muted' }, `${messages.length} ${state} messages${where}, newest first`),
                         table(messages, columns, { empty: `No ${state} messages.`, id: 'message-table' }));
  }

  const text = h('textarea', { id: 'send-body', rows: 2, cols: 50 }, '{"hello": "world"}');
  const send = h('form', { class: 'inline', id: 'send' }, text, h('button', { type: 'submit' }, 'Send'));
  send.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      let message; try { message = JSON.parse(text.value); } catch { message = text.value; }
      const { msg_id: id } = await api('POST', `${Q}/${enc(name)}/send`, { message });
      note.replaceChildren(h('p', { class: 'ok' }, `Sent message ${id}.`));
      await Promise.all([showStats(), showMessages()]);
    } catch (error) { showError(note, error); }
  });

  main.replaceChildren(h('h1', {}, h('a', { href: '#/queues' }, 'Queues'), ' / ', name),
    h('p', { class: 'muted' }, `visibility timeout ${fmt(queue.visibility_timeout_sec)} s · max reads ${fmt(queue.max_reads)}`
      + (queue.dead_letter_queue ? ` · dead letters go to ${queue.dead_letter_queue}` : '')),
    stats, history.panel, h('h2', {}, 'Send a message'), send, note, h('h2', {}, 'Messages'), tabs, list);
  await Promise.all([showStats(), showMessages(), history.load()]);
  every(signal, showStats);
}
