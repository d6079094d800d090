// History charts of one queue, work queue, partitioned queue or keyed stream: its depth, its oldest
// message's age, and messages in and out per minute, over the last hour or day. The points come from
// the resource's history route: Postbox records one a minute, so the newest is up to a minute old.
// Drawn with uPlot (MIT; uPlot.iife.min.js and its licence are files of the console, loaded by
// index.html as the global `uPlot`).
'use strict';
import { age, api, fmt, h } from './lib.js';

const COLORS = { depth: '#2f5bea', age: '#8a4fd8', in: '#1e8a4c', out: '#d9822b' };
const REFRESH_MS = 60_000;
const GAP = 10;  // px between the charts (style.css .history-grid)

// What each chart draws: its title, its y axis's unit and how a value reads, and its series.
const CHARTS = [
  { id: 'depth', title: 'Depth', unit: 'messages', value: fmt,
    series: (d) => [{ label: 'depth', data: d.depth, stroke: COLORS.depth, fill: `${COLORS.depth}22` }] },
  { id: 'age', title: 'Oldest message age', unit: 'age', value: age,
    series: (d) => [{ label: 'oldest', data: d.oldest_age_sec, stroke: COLORS.age }] },
  { id: 'rate', title: 'Messages per minute', unit: 'messages / min', value: fmt,
    series: (d) => [{ label: 'in', data: d.in_per_min, stroke: COLORS.in },
                    { label: 'out', data: d.out_per_min, stroke: COLORS.out, dash: [6, 3] }] },
];

const shortNumber = (v) => (Math.abs(v) >= 1e6 ? `${+(v / 1e6).toFixed(1)}M`
  : Math.abs(v) >= 1e4 ? `${+(v / 1e3).toFixed(1)}k` : fmt(Math.round(v * 100) / 100));

const clock = (t) => new Date(t * 1000).toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit' });

function draw(box, spec, data, width, sync) {
  const series = spec.series(data);
  const readValue = (u, v) => (v === null || v === undefined ? '—' : spec.value(v));
  const opts = {
    width, height: 190,
    legend: { live: true },
    cursor: { drag: { x: false, y: false }, sync: { key: sync } },  // one minute read on all three
    scales: { x: { time: true, range: () => [data.from, data.to] },
              y: { range: (u, min, max) => [0, Math.max(max ?? 0, spec.id === 'age' ? 60 : 1) * 1.1] } },
    axes: [
      { stroke: '#6b7386', grid: { stroke: '#eef0f5' }, ticks: { stroke: '#e2e5ec' },
        values: (u, splits) => splits.map(clock) },
      { label: spec.unit, labelSize: 18, size: 56, stroke: '#6b7386', grid: { stroke: '#eef0f5' },
        ticks: { stroke: '#e2e5ec' },
        values: (u, splits) => splits.map((v) => (spec.id === 'age' ? age(v) : shortNumber(v))) },
    ],
    series: [{ label: 'time', value: (u, t) => (t ? new Date(t * 1000).toLocaleString('en-GB') : '—') },
      ...series.map((s) => ({ label: s.label, stroke: s.stroke, fill: s.fill, dash: s.dash, width: 2,
                              value: readValue, spanGaps: false, points: { size: 5, fill: s.stroke } }))],
    hooks: { draw: [(u) => { box.dataset.points = String(u.data[0].length); }] },
  };
  box.replaceChildren(h('div', { class: 'history-title' }, spec.title));
  return new globalThis.uPlot(opts, [data.t, ...series.map((s) => s.data)], box);
}

// A panel of the three charts with a last hour / last day toggle, refreshed once a minute until the
// page's signal aborts. `path` is the history route; `unwrap` takes the series out of the answer.
export function historyPanel(path, signal, { unwrap = (x) => x } = {}) {
  let span = 'hour';
  const boxes = CHARTS.map((c) => h('div', { class: 'history-chart', 'data-series': c.id }));
  const note = h('p', { class: 'muted history-note' });
  const buttons = ['hour', 'day'].map((w) => h('button', { 'data-window': w, class: 'small',
    onclick: () => { span = w; load().catch((e) => { note.textContent = e.message; }); } },
  w === 'hour' ? 'Last hour' : 'Last day'));
  const panel = h('div', { class: 'history', id: 'history' },
    h('div', { class: 'history-head' }, h('h2', {}, 'History'), h('div', { class: 'tabs' }, buttons)),
    h('div', { class: 'history-grid' }, boxes), note);
  let plots = [];

  async function load() {
    const data = unwrap(await api('GET', `${path}${path.includes('?') ? '&' : '?'}window=${span}`, undefined,
                                  { signal }));
    for (const b of buttons) b.classList.toggle('active', b.dataset.window === span);
    panel.dataset.window = span;
    for (const p of plots) p.destroy();
    const width = Math.max(260, Math.floor(((panel.clientWidth || 1100) - 2 * GAP) / 3) - 16);  // box padding
    plots = CHARTS.map((spec, i) => draw(boxes[i], spec, data, width, path));
    const last = data.t.length ? new Date(data.t[data.t.length - 1] * 1000).toLocaleTimeString('en-GB') : null;
    note.textContent = last
      ? `A point a minute, recorded by Postbox; the last at ${last}. Hover a chart to read its values.`
      : 'No points yet: Postbox records one a minute, so the first appears within a minute or two.';
  }

  const timer = setInterval(() => load().catch(() => {}), REFRESH_MS);
  signal.addEventListener('abort', () => { clearInterval(timer); for (const p of plots) p.destroy(); });
  return { panel, load };
}
