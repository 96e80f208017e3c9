"""peers_tight - bench/peers' tight mode (issue 35), imported by peers.py.

`run.sh --tight [SIZE]` runs each (peer, workload) with the workload's
clients, the peer's daemon (and the mergerfs mover's copies) in one fresh
memory cgroup of SIZE (bench/tight.py), after dropping the caches: the node
whose RAM the job has taken, where the page cache of the disk straight (or
of a peer's cold directory) is charged to the same limit as the peer's RAM
tier, because the processes that cause it are inside. The S3 servers and
proxies stand for remote stores and stay outside. SIZE defaults to the RAM
budget + 256 MiB (the daemon, the pipeline's processes and a little).

Printed: the pipeline per peer - objects verified, wall, produce rate, CPU
seconds (user, sys) of every process in the cgroup per GiB of the job's data
(written once, read back once), the daemon's own, the cgroup's peak and
peak working set (usage less the inactive page cache), OOM kills, the peak
RAM tier - medians over --repeat rounds, then the ratios to `disk`.
"""

import statistics

import benchlib
import tight

MiB, GiB = benchlib.MiB, benchlib.GiB
EXTRA = 256 * MiB  # the default cgroup: the budget plus this


def default_size(budget):
    return budget + EXTRA


class Run:
    """One (peer, workload) in a fresh cgroup: made before the peer starts,
    read before it stops, removed after (and by benchlib's Cleanup on every
    exit path)."""

    def __init__(self, ctx, peer):
        tight.drop_caches()
        self.cg = tight.create(ctx.tight, peer)
        self.watch = self.cg.watch()
        ctx.cg, ctx.preexec = self.cg, self.cg.preexec

    def finish(self, ctx, res, daemon_pid):
        """Readings into res.tight; called while the peer still runs."""
        u = self.cg.usage()
        u["working_set_peak"] = self.watch.stop()
        d = benchlib.cpu_times(daemon_pid) if daemon_pid else None
        u["daemon_user_s"], u["daemon_sys_s"] = d if d else (None, None)
        res.tight = u

    def remove(self, ctx):
        self.watch.stop()
        ctx.cg = ctx.preexec = None
        self.cg.remove()


def row(ctx, cell):
    """A pipeline cell's tight figures (None where it failed)."""
    u = getattr(cell, "tight", None) or {}
    gib = ctx.overflow * ctx.budget / GiB
    num = (lambda k: cell.get(k) if isinstance(cell.get(k), (int, float)) else None)
    du, ds = u.get("daemon_user_s"), u.get("daemon_sys_s")
    return {
        "ok": num("pipe_wall") is not None,
        "verified": getattr(cell, "verified", 0),
        "wall": num("pipe_wall"),
        "write": num("pipe_write"),
        "cpu": (u["user_s"] + u["sys_s"]) / gib if u else None,
        "user": u["user_s"] / gib if u else None,
        "sys": u["sys_s"] / gib if u else None,
        "daemon": (du + ds) / gib if du is not None else None,
        "peak": u["peak"] / MiB if u else None,
        "ws": u["working_set_peak"] / MiB if u else None,
        "oom": u.get("oom_kills"),
        "ram": num("pipe_ram"),
    }


COLS = [("wall", "wall s"), ("write", "produce MiB/s"), ("cpu", "CPU s/GiB"),
        ("user", "user s/GiB"), ("sys", "sys s/GiB"), ("daemon", "daemon s/GiB"),
        ("peak", "cgroup peak MiB"), ("ws", "working set peak MiB"), ("oom", "OOM kills"),
        ("ram", "RAM tier peak MiB")]
RATIOS = ("wall", "cpu", "user", "sys", "ws")


def fmt(v):
    if v is None:
        return "-"
    return "%.2f" % v if abs(v) < 10 else "{:,.0f}".format(v)


def report(ctx, runs):
    """runs: {peer: [pipeline Cell of each round]}."""
    nfiles = -(-ctx.overflow * ctx.budget // ctx.pipe_file)
    rows, walls = {}, {}
    for peer, cells in runs.items():
        rs = [row(ctx, c) for c in cells]
        m = {}
        for k, _ in COLS:
            vals = [r[k] for r in rs if r[k] is not None]
            m[k] = statistics.median(vals) if vals else None
        m["ok"] = all(r["ok"] for r in rs)
        m["verified"] = min(r["verified"] for r in rs)
        m["oom"] = max((r["oom"] or 0) for r in rs)
        rows[peer], walls[peer] = m, [r["wall"] for r in rs]
    print()
    print("tight node (issue 35): pipeline %dxRAM (%s in %d files) with the job, the peer and"
          " its page cache in one %s memory cgroup (%s); caches dropped before each run"
          % (ctx.overflow, benchlib.fmt_size(ctx.overflow * ctx.budget), nfiles,
             benchlib.fmt_size(ctx.tight), ctx.tight_where))
    head = ["peer", "result"] + [c[1] for c in COLS]
    lines = []
    for peer in ctx.peers:
        m = rows[peer]
        status = "%s %d/%d" % ("ok" if m["ok"] else "FAILED", m["verified"], nfiles)
        lines.append([peer, status] + [fmt(m[k]) for k, _ in COLS])
    benchlib.print_table(head, lines, left={0, 1})
    if ctx.repeat > 1:
        print("medians of %d rounds (peer order alternating); wall s of each: %s"
              % (ctx.repeat, "; ".join("%s %s" % (p, " ".join(fmt(w) for w in walls[p]))
                                       for p in ctx.peers)))
    base = rows.get("disk")
    if base and base["ok"]:
        print("\nratios to disk (x > 1: larger than the disk straight)")
        head = ["peer", ""] + [t for k, t in COLS if k in RATIOS]
        lines = [[p, ""] + [benchlib.fmt_ratio(rows[p][k], base[k]) for k in RATIOS]
                 for p in ctx.peers if p != "disk" and rows[p]["ok"]]
        if lines:
            benchlib.print_table(head, lines, left={0, 1})
    print("CPU s/GiB: every process in the cgroup (the pipeline, the daemon, the mover's"
          " copies), user + sys, per GiB written once and read back once; writeback in"
          " the kernel's flusher threads is in no cgroup's CPU.", flush=True)
    return rows
