"""peers_report - bench/peers' results and table: a Cell per (peer,
workload), the medians of several rounds, the environment block and the
table with the ratios spillway / peer. Imported by peers.py."""

import datetime
import json
import os
import platform
import statistics
import subprocess

import benchlib
from benchlib import GiB, MiB, cmd_first_line, fmt_size, loadavg

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
S3_PEERS = ("spillway-s3", "rclone-s3", "s3fs")


def gib(n):
    return "%.1f GiB" % (n / GiB) if n >= GiB // 4 else "%d MiB" % (n // MiB)


class Result(dict):
    """metric -> value (number) or failure string; .notes: footnotes."""


METRICS = [  # key, workload, title, unit, better
    ("pipe_wall", "pipeline", "pipeline NxRAM: wall time", "s", "low"),
    ("pipe_write", "pipeline", "pipeline NxRAM: produce rate", "MiB/s", "high"),
    ("pipe_ram", "pipeline", "pipeline NxRAM: peak RAM tier", "MiB", "low"),
    ("pipe_rss", "pipeline", "pipeline NxRAM: daemon peak RSS", "MiB", "low"),
    ("small_w", "small", "small 64K: write", "obj/s", "high"),
    ("small_r", "small", "small 64K: random read", "obj/s", "high"),
    ("small_cold", "small", "small 64K: cold write requests", "", "low"),
    ("small_ram", "small", "small 64K: peak RAM tier", "MiB", "low"),
    ("hot", "hot", "hot re-read (3 passes)", "MiB/s", "high"),
    ("ttfb", "cold", "cold read: time to first byte", "ms", "low"),
    ("cold", "cold", "cold read: throughput", "MiB/s", "high"),
]


class Cell(Result):
    def __init__(self):
        super().__init__()
        self.notes = []
        self.units = {}

    def fail(self, keys, text):
        for k in keys:
            self[k] = text
        self.notes.append(text)


def fmt_num(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return short_fail(v)
    if v >= 100:
        return "{:,.0f}".format(v)
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def short_fail(text):
    if text.startswith("n/a"):
        return "n/a"
    t = text.replace("FAILED read: ", "FAIL rd ").replace("FAILED write: ", "FAIL wr ")
    t = t.replace("FAILED: ", "FAIL ").replace("TIMEOUT after ", "TIMEOUT ")
    t = t.replace("daemon died", "died").replace("setup: ", "setup ")
    t = t.replace(" objects", " obj")
    return t if len(t) <= 26 else t[:24] + ".."


def ratio_base(peer):
    return "spillway-s3" if peer in S3_PEERS else "spillway"


def environment(ctx):
    cpu = benchlib.cpu_model()
    rev = cmd_first_line(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": "%d cpus (%s), %d MiB RAM, kernel %s" % (
            os.cpu_count() or 0, cpu,
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MiB, platform.release()),
        "load": loadavg(),
        "spillway": "%s (git %s)" % (ctx.spillway_bin, rev),
        "rclone": cmd_first_line(["rclone", "version"]),
        "mergerfs": cmd_first_line(["mergerfs", "--version"]),
        "s3fs": cmd_first_line(["s3fs", "--version"]),
        "libfuse": "passthrough_ll from libfuse " + cmd_first_line(
            ["pkg-config", "--modversion", "fuse3"]),
        "s3rver": "@20minutes/s3rver " + s3rver_version(),
        "cold disk": "%s (%s)" % (ctx.coldroot, fs_type(ctx.coldroot)),
    }


def s3rver_version():
    try:
        with open(os.path.join(REPO, "tests/s3/node_modules/@20minutes/s3rver/package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return "?"


def fs_type(path):
    r = subprocess.run(["df", "--output=source,fstype", path], capture_output=True, text=True)
    lines = r.stdout.split("\n")
    return " ".join(lines[1].split()) if len(lines) > 1 else "?"


def report(ctx, env, results):
    peers = ctx.peers
    print()
    print("spillway vs peers (issue 7): RAM budget %s, %s" % (
        fmt_size(ctx.budget), "QUICK smoke run" if ctx.quick else "full run"))
    env["load"] = "%s at start, %s at end" % (env["load"], loadavg())
    for k, v in env.items():
        print("  %-10s %s" % (k + ":", v))
    print("  sizes:     pipeline %s in %s files x 8 producers; small %d x 64 KiB (4 threads);"
          " hot %s; cold file %s" % (gib(ctx.overflow * ctx.budget), fmt_size(ctx.pipe_file), ctx.small_n,
                                     fmt_size(ctx.hot_size), fmt_size(ctx.cold_size)))
    print()
    head = ["metric", "unit"] + list(peers)
    rows = []
    for key, wl, title, unit, better in METRICS:
        if wl not in ctx.workloads:
            continue
        row = [title.replace("NxRAM", "%dxRAM" % ctx.overflow), unit or "count"]
        for p in peers:
            v = results[p][wl].get(key)
            cell = fmt_num(v)
            b = results.get(ratio_base(p), {}).get(wl, {})
            a = b.get(key) if b and not p.startswith("spillway") else None
            if isinstance(a, (int, float)) and isinstance(v, (int, float)) and v:
                cell += " (%.2fx)" % (a / v)
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
                         for i, c in enumerate(r)).rstrip()

    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print()
    print("(N.NNx) = spillway / peer, with spillway-s3 as the numerator for the S3 peers"
          " (rclone-s3, s3fs).")
    print("Higher is better for MiB/s and obj/s (ratio > 1 favours spillway); lower is better"
          " for s, ms, MiB and cold write requests (ratio < 1 favours spillway).")
    print("cold write requests: spillway = segments written (stats xattr); S3 peers = PUT+POST"
          " requests seen by a counting proxy;")
    print("  rclone, mergerfs = files created in the cold directory. peak RAM tier = peak df"
          " of the tmpfs holding the peer's hot tier/cache.")
    notes = []
    for p in peers:
        for wl in ctx.workloads:
            for n in results[p][wl].notes:
                if n.startswith("n/a") or n.startswith("cold read: pushed"):
                    continue
                notes.append("  %-12s %-9s %s" % (p, wl, n))
    if notes:
        print("failures (results, not harness errors):")
        print("\n".join(notes))
    print(flush=True)


def median_cell(cells):
    """One Cell from a (peer, workload)'s rounds: each number the median of
    the rounds that measured it, a failure text where a round failed
    (failures are results), every round's notes."""
    if len(cells) == 1:
        return cells[0]
    out = Cell()
    for c in cells:
        out.notes += [n for n in c.notes if n not in out.notes]
        out.units.update(c.units)
    for k in {k for c in cells for k in c}:
        vals = [c[k] for c in cells if k in c]
        fails = [v for v in vals if isinstance(v, str)]
        nums = [v for v in vals if isinstance(v, (int, float))]
        out[k] = fails[0] if fails else statistics.median(nums) if nums else None
    return out


def short_summary(res):
    return ", ".join("%s=%s" % (k, fmt_num(v)) for k, v in res.items())
