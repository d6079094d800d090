// Shared by every page: the API call with the key, DOM building, tables, numbers, the SVG sparkline.
'use strict';

export const BASE = location.pathname.replace(/\/console(\/.*)?$/, '');
const KEY = 'postbox.key';

export const session = {
  get key() { return sessionStorage.getItem(KEY) || ''; },
  set key(v) { v ? sessionStorage.setItem(KEY, v) : sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, message) { super(`${status}: ${message}`); this.status = status; }
}

function errorText(data) {
  if (!data || typeof data !== 'object') return String(data || 'request failed');
  const e = data.error ?? data.detail ?? data.message;
  if (e && typeof e === 'object' && !Array.isArray(e)) return e.message || JSON.stringify(e);
  if (Array.isArray(e)) return e.map((d) => d.msg || JSON.stringify(d)).join('; ');
  return String(e ?? JSON.stringify(data));
}

// One call to the API with the session's key. `ok` lists non-2xx statuses that are answers.
export async function api(method, path, body, { ok = [], signal, raw = false } = {}) {
  const headers = { apikey: session.key };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(BASE + path, { method, headers, signal,
                                       body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok && !ok.includes(r.status)) throw new ApiError(r.status, errorText(data));
  return raw ? { status: r.status, headers: r.headers, data } : data;
}

export const enc = encodeURIComponent;

// Run `fn` every 5 s (a page's refresh) until the page's signal aborts; a failed run waits for the next.
export function every(signal, fn, ms = 5000) {
  const timer = setInterval(() => fn().catch(() => {}), ms);
  signal.addEventListener('abort', () => clearInterval(timer));
}

// h('div', {class: 'x', onclick: fn}, child, 'text', [more]) -> element
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

export function fmt(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') return Number.isInteger(v) ? v.toLocaleString('en') : v.toFixed(1);
  return String(v);
}

export function age(seconds) {
  if (seconds === null || seconds === undefined) return '—';
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

export function when(epochSeconds) {
  if (!epochSeconds) return '—';
  return new Date(epochSeconds * 1000).toISOString().replace('T', ' ').slice(0, 19);
}

export const json = (v, pretty = false) => h('pre', {}, JSON.stringify(v, null, pretty ? 1 : undefined));

// columns: [{label, get(row) -> node|text, num}]
export function table(rows, columns, { empty = 'Nothing here yet.', id } = {}) {
  if (!rows.length) return h('p', { class: 'muted', id }, empty);
  return h('table', { id },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : null }, c.label)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, columns.map((c) => h('td', { class: c.num ? 'num' : null }, c.get(r)))))));
}

export const cards = (pairs) => h('div', { class: 'cards' },
  pairs.map(([k, v, id]) => h('div', { class: 'card' }, h('div', { class: 'v', id }, v), h('div', { class: 'k' }, k))));

export function showError(where, error) {
  where.replaceChildren(h('p', { class: 'error' }, error.message || String(error)));
}

const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

// A small bare line of [time ms, value] points as inline SVG (a table cell's sparkline).
export function spark(points, { width = 140, height = 28 } = {}) {
  const pad = 2;
  const w = width - pad * 2, hh = height - pad * 2;
  const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'spark', role: 'img' });
  if (!points.length) return svg;
  const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + 1);
  const max = Math.max(1, ...points.map((p) => p[1]));
  const xy = points.map(([t, v]) => [pad + ((t - t0) / (t1 - t0)) * w, pad + hh - (v / max) * hh]);
  if (points.length === 1) xy.push([pad + w, xy[0][1]]);
  svg.append(s('polyline', { points: xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' '), class: 'line' }));
  return svg;
}
