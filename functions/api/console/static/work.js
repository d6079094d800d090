// Work queues: scopes and the system agents; a scope's queues with their depths; one queue's
// messages by state, and publishing into it.
'use strict';
import { historyPanel } from './charts.js';
import { api, cards, enc, every, fmt, h, json, showError, table } from './lib.js';

const W = '/v1/modules/scaiqueue';
const STATES = ['pending', 'claimed', 'completed', 'failed', 'dead_lettered', 'cancelled', 'expired'];

const data = async (path, signal) => (await api('GET', W + path, undefined, { signal })).data;
const shortTime = (iso) => (iso ? iso.replace('T', ' ').slice(0, 19) : '—');

export async function workPage(main, signal, scopeId, queueId) {
  if (queueId) return workQueuePage(main, signal, scopeId, queueId);
  if (scopeId) return scopePage(main, signal, scopeId);
  const [scopes, agents] = await Promise.all([data('/scopes?limit=200', signal), data('/system-agents', signal)]);
  main.replaceChildren(h('h1', {}, 'Work scopes'), table(scopes, [
    { label: 'Scope', get: (s) => h('a', { href: `#/work/${enc(s.id)}`, class: 'scope-link' }, s.slug) },
    { label: 'Name', get: (s) => s.display_name },
    { label: 'State', get: (s) => h('span', { class: 'badge' }, s.state) },
    { label: 'Created', get: (s) => shortTime(s.created_at) },
  ], { empty: 'No scopes yet: create one with the API, the client or `postbox work create-scope SLUG`.',
       id: 'scope-table' }),
  h('h2', {}, 'System agents'), table(agents, [
    { label: 'Agent', get: (a) => a.name },
    { label: 'Status', get: (a) => h('span', { class: a.status === 'error' ? 'badge dead' : 'badge' }, a.status) },
    { label: 'Runs', num: true, get: (a) => fmt(a.total_runs) },
    { label: 'Processed', num: true, get: (a) => fmt(a.total_processed) },
    { label: 'Errors', num: true, get: (a) => fmt(a.total_errors) },
    { label: 'Last run', get: (a) => shortTime(a.last_run_at) },
    { label: 'ms', num: true, get: (a) => fmt(a.last_run_duration_ms) },
    { label: 'Last error', get: (a) => a.last_error || '' },
  ], { id: 'agent-table' }));
}

async function scopePage(main, signal, scopeId) {
  const scope = await data(`/scopes/${enc(scopeId)}`, signal);
  const body = h('div', { id: 'work-queues' });
  main.replaceChildren(h('h1', {}, h('a', { href: '#/work' }, 'Work'), ' / ', scope.slug),
    h('p', { class: 'muted' }, `state ${scope.state}` + (scope.description ? ` · ${scope.description}` : '')), body);
  async function load() {
    const queues = await data(`/scopes/${enc(scopeId)}/queues?limit=200`, signal);
    const stats = await Promise.all(queues.map((q) => data(`/scopes/${enc(scopeId)}/queues/${enc(q.id)}/stats`, signal)
      .catch(() => ({}))));
    const rows = queues.map((q, i) => ({ ...q, s: stats[i] }));
    body.replaceChildren(table(rows, [
      { label: 'Queue', get: (q) => h('a', { href: `#/work/${enc(scopeId)}/${enc(q.id)}`, class: 'work-queue-link' }, q.slug) },
      { label: 'Ordering', get: (q) => q.ordering },
      { label: 'Mode', get: (q) => q.consumer_mode },
      { label: 'State', get: (q) => h('span', { class: 'badge' }, q.is_system ? `system · ${q.state}` : q.state) },
      { label: 'Pending', num: true, get: (q) => h('span', { class: 'pending', 'data-queue': q.slug }, fmt(q.s.depth_pending)) },
      { label: 'Claimed', num: true, get: (q) => fmt(q.s.depth_claimed) },
      { label: 'Completed', num: true, get: (q) => fmt(q.s.completed_total) },
      { label: 'Dead lettered', num: true, get: (q) => fmt(q.s.dead_lettered_total) },
    ], { id: 'work-queue-table' }));
  }
  await load();
  every(signal, load);
}

async function workQueuePage(main, signal, scopeId, queueId) {
  const base = `/scopes/${enc(scopeId)}/queues/${enc(queueId)}`;
  const [scope, queue] = await Promise.all([data(`/scopes/${enc(scopeId)}`, signal), data(base, signal)]);
  const stats = h('div', { id: 'work-stats' });
  const history = historyPanel(`${W}${base}/history`, signal, { unwrap: (answer) => answer.data });
  const list = h('div', { id: 'work-messages' });
  const note = h('div', { id: 'note' });
  let state = 'pending';
  const tabs = h('div', { class: 'tabs' }, STATES.map((s) =>
    h('button', { 'data-state': s, id: `tab-${s}`, onclick: () => { state = s; showMessages(); } }, s.replace('_', ' '))));

  async function showStats() {
    const s = await data(`${base}/stats`, signal);
    stats.replaceChildren(cards([['pending', fmt(s.depth_pending), 'work-pending'], ['claimed', fmt(s.depth_claimed)],
      ['published', fmt(s.published_total)], ['completed', fmt(s.completed_total)],
      ['dead lettered', fmt(s.dead_lettered_total)]]));
  }

  async function showMessages() {
    for (const b of tabs.children) b.classList.toggle('active', b.dataset.state === state);
    const messages = await data(`${base}/messages?state=${state}&limit=100`, signal);
    list.replaceChildren(h('p', { class: 'muted' }, `${messages.length} ${state.replace('_', ' ')} messages, oldest first`),
      table(messages, [
        { label: 'Message', get: (m) => h('code', {}, m.id) },
        { label: 'Type', get: (m) => m.type },
        { label: 'Priority', get: (m) => `${m.priority?.tier ?? ''} ${m.priority?.score ?? ''}` },
        { label: 'Attempts', num: true, get: (m) => fmt(m.attempts) },
        { label: 'Created', get: (m) => shortTime(m.created_at) },
        { label: 'Body', get: (m) => json(m.body) },
        { label: 'Outcome', get: (m) => (m.response ? json(m.response) : m.failure_reason || '') },
      ], { empty: `No ${state.replace('_', ' ')} messages.`, id: 'work-message-table' }));
  }

  const text = h('textarea', { id: 'publish-body', rows: 2, cols: 50 }, '{"task": "example"}');
  const kind = h('input', { id: 'publish-type', placeholder: 'type (task)', size: 16 });
  const publish = h('form', { class: 'inline', id: 'publish' }, text, kind, h('button', { type: 'submit' }, 'Publish'));
  publish.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      let body; try { body = JSON.parse(text.value); } catch { body = text.value; }
      const sent = (await api('POST', `${W}${base}/messages`, { body, ...(kind.value ? { type: kind.value } : {}) })).data;
      note.replaceChildren(h('p', { class: 'ok' }, `Published message ${sent.id}.`));
      await Promise.all([showStats(), showMessages()]);
    } catch (error) { showError(note, error); }
  });

  main.replaceChildren(h('h1', {}, h('a', { href: '#/work' }, 'Work'), ' / ',
    h('a', { href: `#/work/${enc(scopeId)}` }, scope.slug), ' / ', queue.slug),
    h('p', { class: 'muted' }, `${queue.ordering} · ${queue.consumer_mode} · ${queue.state}`
      + (queue.max_depth ? ` · max depth ${fmt(queue.max_depth)} (${queue.overflow_policy})` : '')),
    stats, history.panel, queue.is_system ? '' : h('h2', {}, 'Publish a message'), queue.is_system ? '' : publish,
    note, h('h2', {}, 'Messages'), tabs, list);
  await Promise.all([showStats(), showMessages(), history.load()]);
  every(signal, showStats);
}
