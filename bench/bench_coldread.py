#!/usr/bin/env python3
"""spillway cold read once (issue 40): a cold file read whole, once, caches
dropped, against the same bytes in a plain directory on the same disk.

For each build given (--build, and --base for a before/after comparison),
files of each --sizes are written through a mount (nvme= a directory on
--cold, hot_size 3G) and evicted; the same bytes are written to a plain
directory beside it. Then, --repeat times, in alternating order, with caches
dropped before each read:

  whole       open, read the file once with 1 MiB reads, close;
  first 4M    open and the first 4 MiB (the time to first useful bytes);

for three forms of the cold file: "extent" (the default: a big file evicted
whole is one file on the disk, read by the kernel through passthrough),
"segments" (extents=off: packed into segments, read through the daemon) and
"plain". Printed: medians with their range, the ratios to plain, and the
daemon's CPU seconds per GiB read (/proc/PID/stat).

    sudo python3 bench/bench_coldread.py --build build [--base OLD_BUILD]
        [--cold /var/tmp] [--sizes 32M,1G] [--repeat 3]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_faultin import (MiB, Mount, cpu_s, drop_caches, evict,  # noqa: E402
                           parse_size, write_file)


def read_whole(path, limit=None):
    """Seconds to open, read (1 MiB at a time, up to limit bytes) and close."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while limit is None or got < limit:
            b = os.read(fd, MiB)
            if not b:
                break
            got += len(b)
    finally:
        os.close(fd)
    return time.perf_counter() - t0, got


def cold_again(path):
    """Evict path and wait until none of it is in RAM."""
    evict(path)
    t0 = time.time()
    while b"hot=0 " not in os.getxattr(path, "user.spillway.state") + b" ":
        if time.time() - t0 > 60:
            raise RuntimeError("%s: still in RAM after its evict" % path)
        time.sleep(0.05)


def median_range(xs):
    s = sorted(xs)
    return s[len(s) // 2], s[0], s[-1]


def has_extents(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True)
    return "extents" in r.stdout + r.stderr


def run_build(binary, a, plain_dir):
    # a build from before extents packs every file into segments
    forms = {"extent": "", "segments": "extents=off"} if has_extents(binary) else {
        "segments": ""}
    mounts = {f: Mount(binary, a.cold, o) for f, o in forms.items()}
    out = {}
    try:
        names = {}
        for i, size in enumerate(a.sizes):
            n = "f%d" % i
            names[size] = n
            for f, m in mounts.items():
                write_file(m.path(n), size, 100 + i)
                evict(m.path(n))
            if not os.path.exists(os.path.join(plain_dir, n)):
                write_file(os.path.join(plain_dir, n), size, 100 + i, sync=True)
        for m in mounts.values():  # the evictions are done when nothing is hot
            t0 = time.time()
            while m.stats()["hot"]["used"] > 0 and time.time() - t0 < 120:
                time.sleep(0.2)
        cpu = {f: 0.0 for f in mounts}
        for size in a.sizes:
            n = names[size]
            paths = dict((f, m.path(n)) for f, m in mounts.items())
            paths["plain"] = os.path.join(plain_dir, n)
            order = list(paths)
            for r in range(a.repeat):
                for form in (order if r % 2 == 0 else order[::-1]):
                    for case, limit in (("whole", None), ("first 4M", 4 * MiB)):
                        m = mounts.get(form)
                        if m:  # a read may have brought it back into RAM
                            cold_again(paths[form])
                        drop_caches()
                        c0 = cpu_s(m.proc.pid) if m else 0
                        dt, got = read_whole(paths[form], limit)
                        if m and case == "whole":
                            cpu[form] += cpu_s(m.proc.pid) - c0
                        if got != (size if limit is None else min(size, limit)):
                            raise RuntimeError("%s %s: read %d bytes" % (form, n, got))
                        out.setdefault((size, case, form), []).append(dt)
        gib = sum(a.sizes) * a.repeat / float(1 << 30)
        out["cpu"] = {f: c / gib for f, c in cpu.items()}
    finally:
        for m in mounts.values():
            m.close()
    return out


def report(tag, out, a):
    print("[%s]" % tag)
    for size in a.sizes:
        for case in ("whole", "first 4M"):
            p = median_range(out[(size, case, "plain")])
            line = "  %5s MiB %-8s plain %7.1f ms (%.1f-%.1f)" % (
                size // MiB, case, p[0] * 1e3, p[1] * 1e3, p[2] * 1e3)
            for form in ("extent", "segments"):
                if (size, case, form) not in out:
                    continue
                v = median_range(out[(size, case, form)])
                line += "  %s %7.1f ms (%.1f-%.1f) %.2fx" % (
                    form, v[0] * 1e3, v[1] * 1e3, v[2] * 1e3, v[0] / p[0])
            print(line)
    print("  daemon CPU per GiB read: " + ", ".join(
        "%s %.3f s" % (f, c) for f, c in sorted(out["cpu"].items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--base", help="an older build to compare with")
    ap.add_argument("--cold", default="/var/tmp")
    ap.add_argument("--sizes", default="32M,1G")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    a.sizes = [parse_size(s) for s in a.sizes.split(",")]
    if os.geteuid() != 0:
        sys.exit("bench_coldread: run as root (drop_caches, FUSE passthrough)")
    plain_dir = tempfile.mkdtemp(prefix="coldread-plain-", dir=a.cold)
    try:
        builds = [("after", a.build)] + ([("before", a.base)] if a.base else [])
        for tag, b in builds:
            report(tag, run_build(os.path.join(b, "spillway"), a, plain_dir), a)
    finally:
        shutil.rmtree(plain_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
