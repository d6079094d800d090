"""What a soak decile's cost is made of, so that a run can tell noise from growth: PostgreSQL's
write-ahead log, checkpoints, buffer writes, autovacuum by table group and shared buffers in use (its
statistics views, read at each decile's end), the server's CPU by kind of process (read from
/proc while the decile runs), and the machine's own speed in the decile (a fixed piece of work timed
in a thread of its own, and the CPU time the hypervisor took from the machine's cores)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

COUNTERS = """
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, w.wal_fpi, c.num_timed, c.num_requested,
       c.buffers_written,
       (SELECT coalesce(sum(writes), 0)::bigint FROM pg_stat_io
         WHERE backend_type = 'client backend' AND object = 'relation')
FROM pg_stat_wal w, pg_stat_checkpointer c
"""
AUTOVACUUMS = "SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables"
BUFFERS = "SELECT buffers_used, buffers_used + buffers_unused, buffers_dirty FROM pg_buffercache_summary()"


@dataclass(frozen=True)
class Counters:
    """PostgreSQL's cumulative counters (since it started) and its shared buffers, at one moment."""

    wal: int  # the WAL insert position in bytes: every WAL byte written
    fpi: int  # full-page images in the WAL (pg_stat_wal counts them, not their bytes)
    checkpoints_timed: int  # checkpoint_timeout came round (skipped ones included)
    checkpoints_requested: int  # max_wal_size reached, or asked for
    checkpoint_buffers: int  # buffers the checkpointer wrote
    backend_writes: int  # buffers client backends wrote themselves, to evict a dirty one
    autovacuums: dict[str, tuple[int, int]]  # table group -> (autovacuum, autoanalyze) runs
    buffers: tuple[int, int, int] | None  # shared buffers in use, in all, dirty (None: no pg_buffercache)


def enable_buffercache(url: str) -> bool:
    """pg_buffercache ships with the embedded server: created in the run's database when it is there."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
        return True
    except psycopg.Error:
        return False


def read_counters(conn: psycopg.Connection, group_of: Callable[[str], str], buffercache: bool) -> Counters:
    wal, fpi, timed, requested, written, backend = conn.execute(COUNTERS).fetchone()
    autovacuums: dict[str, tuple[int, int]] = {}
    for table, vacuums, analyzes in conn.execute(AUTOVACUUMS):
        v, a = autovacuums.get(group_of(table), (0, 0))
        autovacuums[group_of(table)] = (v + vacuums, a + analyzes)
    buffers = conn.execute(BUFFERS).fetchone() if buffercache else None
    return Counters(wal, fpi, timed, requested, written, backend, autovacuums, buffers)


# ---- the server's CPU by kind of process ---------------------------------------------------------

BACKGROUND = {  # PostgreSQL's process titles (`postgres: <title>`) -> kind; any other title is a backend
    "autovacuum": "autovacuum", "checkpointer": "checkpointer", "background writer": "bgwriter",
    "walwriter": "walwriter", "io worker": "io workers", "logical replication launcher": "PG other",
    "walsummarizer": "PG other", "archiver": "PG other", "logger": "PG other",
}
KINDS = ("postbox dev", "PG backends", "autovacuum", "checkpointer", "bgwriter", "walwriter", "io workers",
         "PG other", "unseen")
TICK_S = 0.25
CLOCK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, int, float, float]]:
    """Every process: pid -> (parent pid, start time, its CPU seconds, its reaped children's)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # field n of proc(5) is fields[n - 3]
            except OSError:
                continue
            out[int(name)] = (int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / CLOCK,
                              (int(fields[13]) + int(fields[14])) / CLOCK)
    return out


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Sampler:
    """Runs `_step` every `every_s` in a thread of its own while it is open, and `_start` / `_finish`
    as it opens and closes (a decile's measures read over the decile)."""

    every_s = 1.0

    def __enter__(self):
        self._stop = threading.Event()
        self._start()
        self._thread = threading.Thread(target=self._sample, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._finish()

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self._step()

    def _start(self) -> None: ...

    def _step(self) -> None: ...

    def _finish(self) -> None: ...


class CpuByKind(Sampler):
    """CPU seconds the server's processes use while it is open, by kind: `postbox dev` (its gateway
    workers and agents), PostgreSQL's backends, and each kind of its background processes (the
    postmaster with the launchers as `PG other`). Sampled every TICK_S: a process that ends is counted
    to its last moment through its parent's reaped-children times; one that starts and ends between
    two samples (a short connection's backend, an autovacuum worker with little to do) as `unseen`."""

    def __init__(self, dev_pid: int, postmaster_pid: int) -> None:
        self.roots = {dev_pid: "postbox dev", postmaster_pid: "PG other"}
        self.used = dict.fromkeys(KINDS, 0.0)
        self._kinds: dict[tuple[int, int], str] = {}

    every_s = TICK_S

    def _start(self) -> None:
        self._last = self._tree()

    def _finish(self) -> None:
        self._step()

    def _kind(self, key: tuple[int, int], root: str) -> str:
        if root == "postbox dev":
            return root
        if key not in self._kinds:
            title = _title(key[0])
            if not title.startswith("postgres: "):
                return "PG other"  # just forked, its title not set yet: looked at again next time
            name = title.removeprefix("postgres: ")
            self._kinds[key] = next((k for t, k in BACKGROUND.items() if name.startswith(t)), "PG backends")
        return self._kinds[key]

    def _tree(self) -> dict[tuple[int, int], tuple[str, tuple[int, int] | None, float, float]]:
        """The server's processes: (pid, start) -> (kind, parent's key, CPU seconds, reaped children's)."""
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, *_) in procs.items():
            children.setdefault(parent, []).append(pid)
        tree = {}
        for root, root_kind in self.roots.items():
            if root not in procs:
                continue
            todo = [(root, None)]
            while todo:
                pid, parent = todo.pop()
                _, start, own, reaped = procs[pid]
                key = (pid, start)
                tree[key] = (root_kind if pid == root else self._kind(key, root_kind), parent, own, reaped)
                todo += [(child, key) for child in children.get(pid, ())]
        return tree

    def _step(self) -> None:
        now, last = self._tree(), self._last
        for key, (kind, _, own, _) in now.items():
            self.used[kind] += own - (last[key][2] if key in last else 0.0)
        ended: dict[tuple[int, int] | None, list[tuple[int, int]]] = {}
        for key in last.keys() - now.keys():
            ended.setdefault(last[key][1], []).append(key)
        for parent in last.keys() & now.keys():  # what its children used since they were last seen
            gone = ended.get(parent, [])
            missing = now[parent][3] - last[parent][3] - sum(last[key][2] for key in gone)
            if missing > 0:
                self.used[last[gone[0]][0] if gone else "unseen"] += missing
        self._last = now


# ---- the report ------------------------------------------------------------------------------------


class MachineSpeed(Sampler):
    """How fast the machine itself is while it is open. A virtual machine's cores are shared with the
    host's other work: when a neighbour loads the same physical cores and caches, every process needs
    more CPU time for the same work, ours included, and CPU time per message or a latency cannot tell
    that from our own work growing. A fixed piece of pure Python work, timed in CPU time every
    2 s in a thread of its own (about 2 % of a core), can: `probe_ms` is its median. `steal_s`
    is the time the hypervisor ran something else on the machine's cores (/proc/stat), for every core."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.probe_ms = self.steal_s = 0.0

    every_s = 2.0

    def _start(self) -> None:
        self._steal = _steal_ticks()

    def _step(self) -> None:
        started = time.thread_time()
        fixed_work()
        self.samples.append(time.thread_time() - started)

    def _finish(self) -> None:
        self.steal_s = (_steal_ticks() - self._steal) / os.sysconf("SC_CLK_TCK")
        self.probe_ms = statistics.median(self.samples) * 1000 if self.samples else 0.0


def fixed_work() -> int:
    """The same instructions every time (about 40 ms of CPU on the 2-core test machine)."""
    total = 0
    for i in range(400_000):
        total = (total + i * i) % 1_000_003
    return total


def _steal_ticks() -> int:
    with open("/proc/stat") as stat:
        fields = stat.readline().split()  # cpu user nice system idle iowait irq softirq steal ...
    return int(fields[8]) if len(fields) > 8 else 0


def report(number: int, snaps: list, per: int, idle: dict[str, float], groups: tuple[str, ...]) -> None:
    """Section `number`: each decile's WAL, checkpoints, writes, buffers, CPU by kind and autovacuum
    runs. `snaps` carry `decile`, `counters` and `cpu_by_kind`; `per` is a decile's messages; `idle`
    the server's CPU seconds a second at rest, by kind."""
    print(f"\n{number}. What each decile's cost is made of: over the decile, WAL bytes and full-page images"
          " (FPI: PostgreSQL counts them, not their bytes) per message, checkpoints timed and requested and the"
          " buffers they wrote, buffers client backends wrote themselves to evict dirty ones; at its end, shared"
          " buffers in use and dirty (PostgreSQL's statistics lag its processes by up to a second); the machine's"
          " speed: a fixed piece of work's CPU time (median of the decile's probes) and the CPU time the"
          " hypervisor took from the machine's cores")
    heads = ("decile", "WAL B/msg", "FPI/msg", "ckpt timed", "ckpt req", "ckpt bufs", "backend wr",
             "buffers used", "dirty", "probe ms", "steal s")
    print("  " + "  ".join(f"{h:>12}" for h in heads))
    for i, s in enumerate(snaps):
        c = s.counters
        used = (f"{c.buffers[0]:,}/{c.buffers[1]:,}", f"{c.buffers[2]:,}") if c.buffers else ("-", "-")
        machine = (f"{s.machine.probe_ms:.1f}", f"{s.machine.steal_s:.1f}") if s.machine else ("-", "-")
        if not i:
            cells = (s.decile, "-", "-", "-", "-", "-", "-", *used, *machine)
        else:
            b = snaps[i - 1].counters
            cells = (s.decile, f"{(c.wal - b.wal) / per:,.0f}", f"{(c.fpi - b.fpi) / per:.3f}",
                     c.checkpoints_timed - b.checkpoints_timed, c.checkpoints_requested - b.checkpoints_requested,
                     f"{c.checkpoint_buffers - b.checkpoint_buffers:,}", f"{c.backend_writes - b.backend_writes:,}",
                     *used, *machine)
        print("  " + "  ".join(f"{x:>12}" for x in cells))

    background = KINDS[2:-1]
    print(f"  the server's CPU per message by kind of process, ms (not less its CPU at rest; background:"
          f" {', '.join(background)}; unseen: processes that began and ended within {TICK_S} s)")
    heads = ("decile", "postbox dev", "PG backends", "PG backgr.", *background, "unseen", "total")
    print("  " + "  ".join(f"{h:>12}" for h in heads))
    print("  " + "  ".join(f"{x:>12}" for x in ("rest ms/s", *_split(idle, 1))))
    for s in snaps[1:]:
        print("  " + "  ".join(f"{x:>12}" for x in (s.decile, *_split(s.cpu_by_kind, per))))

    print("  autovacuum / autoanalyze runs by table group")
    print("  " + "  ".join(f"{h:>12}" for h in ("decile", *groups)))
    for before, s in zip(snaps, snaps[1:], strict=False):  # every decile with the one before it
        a, b = s.counters.autovacuums, before.counters.autovacuums
        cells = [f"{a.get(g, (0, 0))[0] - b.get(g, (0, 0))[0]}/{a.get(g, (0, 0))[1] - b.get(g, (0, 0))[1]}"
                 for g in groups]
        print("  " + "  ".join(f"{x:>12}" for x in (s.decile, *cells)))


def last_over_first(snaps: list, per: int) -> list[tuple[str, float, float, str]]:
    """The first decile's and the last's WAL and CPU by side, per message, for the run's last/first lines."""
    def figures(before, s) -> dict[str, float]:
        return {"WAL per message": (s.counters.wal - before.counters.wal) / per, **_cpu_ms(s.cpu_by_kind, per),
                "machine: fixed work": s.machine.probe_ms if s.machine else 0.0}

    first, last = figures(snaps[0], snaps[1]), figures(snaps[-2], snaps[-1])
    names = {"WAL per message": "B", "postbox dev": "ms", "PG backends": "ms", "PG background": "ms",
             "machine: fixed work": "ms"}
    return [(name if unit == "B" or name.startswith("machine") else f"CPU/msg: {name}", first[name], last[name],
             unit) for name, unit in names.items()]


def _cpu_ms(seconds: dict[str, float], per: int) -> dict[str, float]:
    """Milliseconds per message by kind, with PostgreSQL's background processes summed."""
    ms = {k: v / per * 1000 for k, v in seconds.items()}
    return {**ms, "PG background": sum(ms[k] for k in KINDS[2:-1])}


def _split(seconds: dict[str, float], per: int) -> tuple[str, ...]:
    ms = _cpu_ms(seconds, per)
    return tuple(f"{ms[k]:.3f}" for k in ("postbox dev", "PG backends", "PG background", *KINDS[2:])) + (
        f"{sum(seconds.values()) / per * 1000:.3f}",)
