// pg-boss's side of bench/work_peers.py, run by the Node the benchmark installed under build/
// (pg-boss is never installed into the project's environment).
//
//     node pgboss_side.mjs URL install | fill N | drain CLIENTS BATCH | publish CLIENTS N | batch CLIENTS N
//
// Each command prints one JSON line: the seconds from the common start (every client started, its
// one connection open) to the last client's end, the CPU seconds this process spent in between,
// and what was done. pg-boss's own calls: `send`
// (one job), `insert` (many), `fetch({batchSize})` + `complete(name, ids)` (the row stays, state
// completed, until its retention). Each client is a PgBoss instance with a pool of one connection;
// supervision, scheduling and migration are off (no background work on the clock).
import { PgBoss } from 'pg-boss'
import pg from 'pg'

const QUEUE = 'bench'
const [url, command, ...rest] = process.argv.slice(2)
const args = rest.map(Number)
const payload = (n) => ({ to: 'a@example.com', n })
let cpu = 0 // this process's CPU seconds over the timed part of the last command

async function boss (migrate = false) {
  const b = new PgBoss({ connectionString: url, max: 1, supervise: false, schedule: false, migrate })
  b.on('error', (e) => { console.error(e); process.exit(1) })
  await b.start()
  return b
}

async function clients (count, work) {
  const sides = []
  for (let i = 0; i < count; i++) sides.push(await boss())
  const t0 = process.hrtime.bigint()
  const cpu0 = process.cpuUsage()
  const results = await Promise.all(sides.map((b, i) => work(b, i)))
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const used = process.cpuUsage(cpu0)
  cpu = (used.user + used.system) / 1e6
  for (const b of sides) await b.stop({ graceful: false, close: true })
  return [seconds, results]
}

async function query (sql) {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const r = await c.query(sql)
  await c.end()
  return r.rows
}

const commands = {
  async install () {
    const b = await boss(true)
    await b.createQueue(QUEUE)
    await b.stop({ graceful: false, close: true })
    return {}
  },
  async fill (n) { // pg-boss's batch insert, 5,000 jobs a call
    const b = await boss()
    for (let start = 0; start < n; start += 5000) {
      const jobs = []
      for (let i = start; i < Math.min(n, start + 5000); i++) jobs.push({ data: payload(i) })
      await b.insert(QUEUE, jobs)
    }
    await b.stop({ graceful: false, close: true })
    return { filled: n }
  },
  async drain (count, batch) {
    const [seconds, results] = await clients(count, async (b) => {
      const done = []
      for (;;) {
        const jobs = await b.fetch(QUEUE, { batchSize: batch })
        if (!jobs.length) return done
        const ids = jobs.map((j) => j.id)
        await b.complete(QUEUE, ids)
        done.push(...ids)
      }
    })
    const all = results.flat()
    const [row] = await query(`SELECT count(*) FILTER (WHERE state = 'completed')::int AS completed,
                                      count(*) FILTER (WHERE state <> 'completed')::int AS left
                               FROM pgboss.job WHERE name = '${QUEUE}'`)
    return { seconds, answers: all.length, distinct: new Set(all).size, left: row.left, logged: row.completed }
  },
  async publish (count, n) {
    const share = Math.floor(n / count)
    const [seconds, results] = await clients(count, async (b, i) => {
      for (let k = 0; k < share; k++) await b.send(QUEUE, payload(i * share + k))
      return share
    })
    return { seconds, messages: results.reduce((a, b) => a + b, 0) }
  },
  async batch (count, n, size = 100) {
    const share = Math.floor(n / count)
    const [seconds, results] = await clients(count, async (b, i) => {
      for (let start = 0; start < share; start += size) {
        const jobs = []
        for (let k = 0; k < size; k++) jobs.push({ data: payload(i * share + start + k) })
        await b.insert(QUEUE, jobs)
      }
      return share
    })
    return { seconds, messages: results.reduce((a, b) => a + b, 0) }
  },
  async clear () {
    await query(`DELETE FROM pgboss.job WHERE name = '${QUEUE}'`)
    return {}
  }
}

console.log(JSON.stringify({ ...(await commands[command](...args)), cpu }))
