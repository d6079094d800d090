"""pgqueuer's side of bench/work_peers.py, run by the python of its own venv under build/ (pgqueuer
and asyncpg are never installed into the project's environment).

    python pgqueuer_side.py URL install | fill N | drain CLIENTS BATCH | publish CLIENTS N | batch CLIENTS N

Each command prints one JSON line: the seconds from the common start (connections open) to the
last client's end, the CPU seconds this process spent in between, and what was done. pgqueuer's
own calls throughout: `Queries.install`, `enqueue` (one job, or lists of them),
`dequeue(batch_size)` + `log_jobs` (which deletes the jobs and writes their log rows).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import timedelta

import asyncpg
from pgqueuer.queries import EntrypointExecutionParameter, Queries

ENTRYPOINT = "bench"
CPU = [0.0]  # this process's CPU seconds over the timed part of the last command


def payload(n: int) -> bytes:
    return json.dumps({"to": "a@example.com", "n": n}).encode()


async def connect(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(url)
    return conn, Queries.from_asyncpg_connection(conn)


async def install(url: str) -> dict:
    conn, q = await connect(url)
    await q.install()
    await conn.close()
    return {}


async def fill(url: str, n: int) -> dict:
    """The backlog, in pgqueuer's batch enqueue of 5,000 jobs a call."""
    conn, q = await connect(url)
    for start in range(0, n, 5000):
        k = min(5000, n - start)
        await q.enqueue([ENTRYPOINT] * k, [payload(start + i) for i in range(k)], [0] * k)
    await conn.close()
    return {"filled": n}


async def clients(url: str, count: int, work) -> tuple[float, list]:
    sides = [await connect(url) for _ in range(count)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    results = await asyncio.gather(*(work(q, i) for i, (_, q) in enumerate(sides)))
    seconds = time.perf_counter() - t0
    CPU[0] = time.process_time() - cpu0
    for conn, _ in sides:
        await conn.close()
    return seconds, list(results)


async def drain(url: str, count: int, batch: int) -> dict:
    entrypoints = {ENTRYPOINT: EntrypointExecutionParameter(concurrency_limit=0)}

    async def work(q: Queries, _: int) -> list[int]:
        manager, done = uuid.uuid4(), []
        while jobs := await q.dequeue(batch_size=batch, entrypoints=entrypoints, queue_manager_id=manager,
                                      global_concurrency_limit=None, heartbeat_timeout=timedelta(seconds=60)):
            await q.log_jobs([(job, "successful", None) for job in jobs])
            done.extend(job.id for job in jobs)
        return done

    seconds, results = await clients(url, count, work)
    done = [i for r in results for i in r]
    conn = await asyncpg.connect(url)
    left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    logged = await conn.fetchval("SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'")
    await conn.close()
    return {"seconds": seconds, "answers": len(done), "distinct": len(set(done)), "left": left, "logged": logged}


async def publish(url: str, count: int, n: int) -> dict:
    share = n // count

    async def work(q: Queries, i: int) -> int:
        for k in range(share):
            await q.enqueue(ENTRYPOINT, payload(i * share + k))
        return share

    seconds, results = await clients(url, count, work)
    return {"seconds": seconds, "messages": sum(results)}


async def batch(url: str, count: int, n: int, size: int = 100) -> dict:
    share = n // count

    async def work(q: Queries, i: int) -> int:
        for start in range(0, share, size):
            await q.enqueue([ENTRYPOINT] * size, [payload(i * share + start + k) for k in range(size)], [0] * size)
        return share

    seconds, results = await clients(url, count, work)
    return {"seconds": seconds, "messages": sum(results)}


async def clear(url: str) -> dict:
    conn = await asyncpg.connect(url)
    await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
    await conn.close()
    return {}


def main() -> None:
    url, command, *args = sys.argv[1:]
    call = {"install": install, "fill": fill, "drain": drain, "publish": publish, "batch": batch, "clear": clear}
    print(json.dumps({**asyncio.run(call[command](url, *map(int, args))), "cpu": CPU[0]}))


if __name__ == "__main__":
    main()
