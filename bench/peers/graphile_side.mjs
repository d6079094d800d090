// graphile-worker's side of bench/work_peers.py, run by the Node the benchmark installed under
// build/ (graphile-worker is never installed into the project's environment).
//
//     node graphile_side.mjs URL install | fill N | drain CLIENTS BATCH | publish CLIENTS N | batch CLIENTS N
//
// Each command prints one JSON line: the seconds from the common start (every client started) to
// the last job's completion, the CPU seconds this process spent in between, and what was done.
// graphile-worker has no call that takes N jobs and one that completes them: its worker takes jobs
// into a local queue (up to `localQueue.size` in one query), runs a task for each, and completes
// them in batches (`completeJobBatchDelay`). A drain client is one such worker with a local queue
// of BATCH, BATCH tasks at once and completions batched in the same tick, its pool of 2
// connections (one is held by its LISTEN); completed jobs are deleted.
import { Logger, makeWorkerUtils, run, runMigrations } from 'graphile-worker'
import pg from 'pg'

const TASK = 'bench'
const [url, command, ...rest] = process.argv.slice(2)
const args = rest.map(Number)
const payload = (n) => ({ to: 'a@example.com', n })
const quiet = { logger: new Logger(() => () => {}) } // no line per job on the clock
let cpu = 0 // this process's CPU seconds over the timed part of the last command

async function query (sql) {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  const r = await c.query(sql)
  await c.end()
  return r.rows
}

async function utils () {
  return makeWorkerUtils({ connectionString: url, ...quiet, preset: { worker: { maxPoolSize: 1 } } })
}

async function timed (work) {
  const t0 = process.hrtime.bigint()
  const cpu0 = process.cpuUsage()
  const result = await work()
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const used = process.cpuUsage(cpu0)
  cpu = (used.user + used.system) / 1e6
  return [seconds, result]
}

const commands = {
  async install () {
    await runMigrations({ connectionString: url, ...quiet })
    return {}
  },
  async fill (n) { // graphile-worker's batch add, 5,000 jobs a call
    const u = await utils()
    for (let start = 0; start < n; start += 5000) {
      const jobs = []
      for (let i = start; i < Math.min(n, start + 5000); i++) jobs.push({ identifier: TASK, payload: payload(i) })
      await u.addJobs(jobs)
    }
    await u.release()
    return { filled: n }
  },
  async drain (count, batch) {
    const [{ n }] = await query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs')
    const done = []
    const runners = []
    let finished
    const all = new Promise((resolve) => { finished = resolve })
    const taskList = {
      [TASK]: async (_payload, helpers) => {
        done.push(helpers.job.id)
        if (done.length === n) finished()
      }
    }
    const [seconds] = await timed(async () => {
      for (let i = 0; i < count; i++) {
        runners.push(await run({
          connectionString: url, concurrency: batch, noHandleSignals: true, taskList, ...quiet,
          preset: { worker: { maxPoolSize: 2, localQueue: { size: batch }, completeJobBatchDelay: 0, pollInterval: 100 } }
        }))
      }
      await all
      // the last completions are written after their tasks end: wait until the table is empty
      for (;;) {
        const [{ left }] = await query('SELECT count(*)::int AS left FROM graphile_worker._private_jobs')
        if (left === 0) return
        await new Promise((resolve) => setTimeout(resolve, 2))
      }
    })
    for (const r of runners) await r.stop()
    const [{ left }] = await query('SELECT count(*)::int AS left FROM graphile_worker._private_jobs')
    // completed jobs are deleted: each one done once and nothing left is what completion means here
    return { seconds, answers: done.length, distinct: new Set(done).size, left, logged: n - left }
  },
  async publish (count, n) {
    const share = Math.floor(n / count)
    const sides = []
    for (let i = 0; i < count; i++) sides.push(await utils())
    const [seconds] = await timed(() => Promise.all(sides.map(async (u, i) => {
      for (let k = 0; k < share; k++) await u.addJob(TASK, payload(i * share + k))
    })))
    for (const u of sides) await u.release()
    return { seconds, messages: share * count }
  },
  async batch (count, n, size = 100) {
    const share = Math.floor(n / count)
    const sides = []
    for (let i = 0; i < count; i++) sides.push(await utils())
    const [seconds] = await timed(() => Promise.all(sides.map(async (u, i) => {
      for (let start = 0; start < share; start += size) {
        const jobs = []
        for (let k = 0; k < size; k++) jobs.push({ identifier: TASK, payload: payload(i * share + start + k) })
        await u.addJobs(jobs)
      }
    })))
    for (const u of sides) await u.release()
    return { seconds, messages: share * count }
  },
  async clear () {
    await query('DELETE FROM graphile_worker._private_jobs')
    return {}
  }
}

console.log(JSON.stringify({ ...(await commands[command](...args)), cpu }))
