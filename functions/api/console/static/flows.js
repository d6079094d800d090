// Flows queries and their state.
'use strict';
import { api, enc, h, json, table } from './lib.js';
import { knownQueues } from './partitioned.js';

const SEP = '\u001f';

// Queries are found through the consumer groups (`streams.<query_id>`) of the partitioned queues
// opened in this console: the API lists no queries.
async function discovered(signal) {
  const out = [];
  for (const name of knownQueues()) {
    try {
      const res = await api('GET', `/api/v1/resources/queues/${enc(name)}`, undefined, { signal });
      for (const p of res.partitions) {
        for (const g of p.consumerGroups) {
          if (g.name.startsWith('streams.')) out.push({ queue: name, queryId: g.name.slice(8), p, g });
        }
      }
    } catch { /* a queue since deleted */ }
  }
  return out;
}

export async function flowsPage(main, signal, queryId, partitionId) {
  const qid = h('input', { id: 'query-id', placeholder: 'query_id', required: true, value: queryId || '', size: 38 });
  const pid = h('input', { id: 'partition-id', placeholder: 'partitionId', required: true, value: partitionId || '' });
  const form = h('form', { class: 'inline' }, qid, pid, h('button', { type: 'submit' }, 'Show state'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = `#/flows/${enc(qid.value.trim())}/${enc(pid.value.trim())}`;
  });
  const found = await discovered(signal);
  main.replaceChildren(h('h1', {}, 'Flows queries'), form,
    h('h2', {}, 'Queries reading the partitioned queues opened here'),
    table(found, [
      { label: 'Source queue', get: (r) => r.queue },
      { label: 'query_id', get: (r) => h('a', { href: `#/flows/${enc(r.queryId)}/${enc(r.p.partitionId)}` }, r.queryId) },
      { label: 'Partition', get: (r) => `${r.p.name} (${r.p.partitionId})` },
      { label: 'Lag', num: true, get: (r) => String(r.g.lag) },
    ], { empty: 'None yet: open a partitioned queue a query reads, or enter a query_id and partitionId.' }));
  if (!queryId) return;
  const { rows } = await api('POST', '/streams/v1/state/get', { query_id: queryId, partition_id: partitionId }, { signal });
  main.append(h('h2', {}, `State of ${queryId} on partition ${partitionId}`), table(rows, [
    { label: 'Window', get: (r) => r.key.split(SEP).slice(0, 2).join(' · ') },
    { label: 'Key', get: (r) => r.key.split(SEP).slice(2).join(SEP) },
    { label: 'Value', get: (r) => json(r.value) },
    { label: 'Updated', get: (r) => r.updated_at || '' },
  ], { empty: 'No state rows.', id: 'state-table' }));
}
