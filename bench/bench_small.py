#!/usr/bin/env python3
"""Many small objects through a small RAM tier: spillway vs mergerfs vs rclone.

N objects of 100 B - 3 KiB (sizes and bytes from a fixed seed), 1,000 per
directory, written then read back through each target, side by side in one
run, with the same RAM budget (--hot-size, default 64M) and the same disk
(--workdir, default /var/tmp):

  spillway  hot_dir on a private tmpfs, hot_size=64M, nvme=<disk dir>;
  mergerfs  a 64M tmpfs branch first, a disk branch second,
            category.create=ff with minfreespace (fills tmpfs, then the disk),
            moveonenospc;
  rclone    rclone mount of a local-disk remote, --vfs-cache-mode full, cache
            dir on a private tmpfs, --vfs-cache-max-size 64M.

Per target: objects/s written, objects/s read back (page cache dropped, every
byte checked), peak RAM = tmpfs used + daemon RSS + kernel slab delta (sampled
every 0.2 s during the write; also each part at the end), cold bytes / live
bytes (disk blocks allocated under the disk dir / bytes written; for
spillway also the segments alone, from their footers: records, padding,
maps, headers and footers / bytes written) and remount
time (unmount, start the daemon again, until a stat of the root answers;
spillway replays its journal here). Ratios are spillway / peer.

Run as root: python3 bench/bench_small.py [--quick] [-n N] [--targets
spillway,mergerfs,rclone] [--build BUILD] [--json FILE]. --quick is 4,000 objects
(< 60 s for all three on 2 cores). A missing peer binary is skipped, not a failure; exit 1
only when the harness fails (a mount, a short read, a wrong byte).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
import benchlib  # noqa: E402
from benchlib import meminfo, proc_status  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from lib.tier import seg_layout  # noqa: E402  (the tests' segment footer parser)

MiB = 1 << 20
PER_DIR = 1000


def parse_size(v):
    return benchlib.parse_size(v)


def objects(n, seed=42):
    """(path, size, seed byte) of every object."""
    rnd = random.Random(seed)
    return [("d%04d/o%07d" % (i // PER_DIR, i), rnd.randint(100, 3072), i & 0xff)
            for i in range(n)]


def body(size, tag, _cache={}):
    if tag not in _cache:
        _cache[tag] = bytes((tag + k * 7) & 0xff for k in range(3072))
    return _cache[tag][:size]


def disk_used(path):
    """Bytes of disk blocks allocated under path."""
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def fs_used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class Tmpfs:
    def __init__(self, parent, size):
        self.path = tempfile.mkdtemp(prefix="small-tmpfs-", dir=parent)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", self.path],
                       check=True)

    def close(self):
        subprocess.run(["umount", "-l", self.path], capture_output=True)
        os.rmdir(self.path)


class Target:
    """One filesystem under test: mount(), the daemon's pid, its RAM parts."""

    def __init__(self, name, opts, work):
        self.name, self.o, self.work = name, opts, work
        self.mnt = os.path.join(work, "mnt")
        self.disk = os.path.join(work, "disk")
        os.makedirs(self.mnt)
        os.makedirs(self.disk)
        self.tmpfs = Tmpfs("/dev/shm", self.ram_tmpfs_size())
        self.proc = None
        self.log = os.path.join(work, name + ".log")

    def ram_tmpfs_size(self):
        return "1G"

    def start(self):
        self.proc = benchlib.start_daemon(self.name, self.argv(), self.mnt, self.log)

    def stop(self):
        entry = next(e for e in benchlib.CLEANUP.daemons if e[1] is self.proc)
        benchlib.CLEANUP.daemons.remove(entry)
        if not benchlib.CLEANUP.stop_daemon(self.name, self.proc, self.mnt):
            raise benchlib.BenchError("%s: could not unmount" % self.name)

    def settle(self, n):
        pass

    def ram(self):
        return fs_used(self.tmpfs.path), proc_status(self.proc.pid)["VmRSS"]

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.stop()
        self.tmpfs.close()


class Spillway(Target):
    def argv(self):
        return [os.path.join(self.o.build, "spillway"), "-f", "-o",
                "hot_dir=%s/hot,hot_size=%s,nvme=%s" % (self.tmpfs.path, self.o.hot_size,
                                                          self.disk), self.mnt]


class Mergerfs(Target):
    def __init__(self, name, opts, work):
        super().__init__(name, opts, work)
        os.makedirs(os.path.join(self.tmpfs.path, "b"))

    def ram_tmpfs_size(self):
        return self.o.hot_size

    def argv(self):
        return ["mergerfs", "-f", "-o",
                "category.create=ff,minfreespace=4M,moveonenospc=true,cache.files=off,"
                "fsname=small-mergerfs",
                "%s/b:%s" % (self.tmpfs.path, self.disk), self.mnt]


class Rclone(Target):
    def settle(self, n, timeout=300):
        """Uploads are asynchronous (write-back): wait until the remote holds
        all n objects, or an unmount would lose the rest."""
        deadline = time.monotonic() + timeout
        while sum(len(f) for _, _, f in os.walk(self.disk)) < n:
            if time.monotonic() > deadline:
                raise benchlib.BenchError("rclone: uploads not done after %ds" % timeout)
            time.sleep(0.2)

    def argv(self):
        return ["rclone", "mount", self.disk, self.mnt, "--vfs-cache-mode", "full",
                "--cache-dir", self.tmpfs.path, "--vfs-cache-max-size", self.o.hot_size,
                "--vfs-cache-poll-interval", "5s", "--vfs-write-back", "1s", "--dir-cache-time", "1h"]


TARGETS = {"spillway": Spillway, "mergerfs": Mergerfs, "rclone": Rclone}
BINARY = {"spillway": None, "mergerfs": "mergerfs", "rclone": "rclone"}


def run_target(t, objs, slab0):
    r = {}
    t.start()
    peak = {"total": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                tm, rss = t.ram()
                slab = meminfo()["Slab"] - slab0
                if tm + rss + slab > peak["total"]:
                    peak.update(total=tm + rss + slab, tmpfs=tm, rss=rss, slab=slab)
            except OSError:
                pass
            stop.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.monotonic()
    made = set()
    for path, size, tag in objs:
        d = os.path.dirname(path)
        if d not in made:
            os.makedirs(os.path.join(t.mnt, d), exist_ok=True)
            made.add(d)
        fd = os.open(os.path.join(t.mnt, path), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body(size, tag))
        finally:
            os.close(fd)
    r["write_s"] = time.monotonic() - t0
    time.sleep(1.0)  # background spill / upload settles into the peak
    stop.set()
    th.join()
    tm, rss = t.ram()
    r.update(peak_ram=peak["total"], peak_parts=dict(peak), end_tmpfs=tm, end_rss=rss,
             end_slab=meminfo()["Slab"] - slab0)
    t.settle(len(objs))
    t1 = time.monotonic()
    t.stop()
    r["unmount_s"] = time.monotonic() - t1
    t1 = time.monotonic()
    t.start()
    r["remount_s"] = time.monotonic() - t1
    benchlib.drop_caches(3)
    t0 = time.monotonic()
    for path, size, tag in objs:
        with open(os.path.join(t.mnt, path), "rb", buffering=0) as f:
            data = f.read(4096)
        if data != body(size, tag):
            raise benchlib.BenchError("%s: %s reads back wrong (%d bytes, want %d)"
                                      % (t.name, path, len(data), size))
    r["read_s"] = time.monotonic() - t0
    live = sum(s for _, s, _ in objs)
    r["live_bytes"] = live
    r["cold_bytes"] = disk_used(t.disk)
    t.stop()
    if t.name == "spillway":  # the segments alone, once the unmount spilled all
        lay = seg_layout(t.disk)
        r["seg_bytes"] = lay["data"] + lay["maps"] + lay["padding"] + lay["hdr_foot"]
        r["seg_versions"] = sorted(lay["versions"])
    return r


def fmt(v, unit):
    if unit == "MiB":
        return "%.1f MiB" % (v / MiB)
    if unit == "/s":
        return "%.0f/s" % v
    if unit == "s":
        return "%.2f s" % v
    return "%.2f" % v


def report(n, res):
    rows = [("write objects/s", "/s", lambda r: n / r["write_s"], "hi"),
            ("read objects/s", "/s", lambda r: n / r["read_s"], "hi"),
            ("peak RAM (tmpfs+RSS+slab)", "MiB", lambda r: r["peak_ram"], "lo"),
            ("  tmpfs at peak", "MiB", lambda r: r["peak_parts"].get("tmpfs", 0), ""),
            ("  daemon RSS at peak", "MiB", lambda r: r["peak_parts"].get("rss", 0), ""),
            ("  slab delta at peak", "MiB", lambda r: r["peak_parts"].get("slab", 0), ""),
            ("daemon RSS at end", "MiB", lambda r: r["end_rss"], "lo"),
            ("cold bytes / live bytes", "x", lambda r: r["cold_bytes"] / r["live_bytes"], "lo"),
            ("  segments / live (spillway)", "x",
             lambda r: r.get("seg_bytes", 0) / r["live_bytes"], ""),
            ("remount time", "s", lambda r: r["remount_s"], "lo")]
    names = [k for k in TARGETS if k in res]
    peers = [k for k in names if k != "spillway"]
    head = "%-28s" % ("%d objects" % n) + "".join("%16s" % k for k in names)
    head += "".join("%18s" % ("spillway/" + p) for p in peers if "spillway" in res)
    print(head)
    for label, unit, fn, _ in rows:
        line = "%-28s" % label + "".join("%16s" % fmt(fn(res[k]), unit) for k in names)
        if "spillway" in res:
            for p in peers:
                a, b = fn(res["spillway"]), fn(res[p])
                line += "%18s" % ("%.2fx" % (a / b) if b else "-")
        print(line)


def save(o, res):
    with open(o.json, "w") as f:
        json.dump({"objects": o.objects, "hot_size": o.hot_size, "results": res}, f, indent=1)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                      os.path.join(HERE, "..", "build")))
    ap.add_argument("-n", "--objects", type=int, default=1000000)
    ap.add_argument("--quick", action="store_true", help="4,000 objects")
    ap.add_argument("--hot-size", default="64M")
    ap.add_argument("--targets", default="spillway,mergerfs,rclone")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--json")
    o = ap.parse_args(argv)
    if o.quick:
        o.objects = 4000
    benchlib.raise_nofile()
    objs = objects(o.objects)
    res, rc, live = {}, 0, []
    try:
        for name in o.targets.split(","):
            if BINARY[name] and subprocess.run(["which", BINARY[name]],
                                               capture_output=True).returncode:
                print("%s: not installed, skipped" % name, file=sys.stderr)
                continue
            work = benchlib.CLEANUP.add_dir(tempfile.mkdtemp(prefix="small-%s-" % name,
                                                             dir=o.workdir))
            benchlib.drop_caches(3)
            slab0 = meminfo()["Slab"]
            t = TARGETS[name](name, o, work)
            live.append(t)
            t0 = time.monotonic()
            res[name] = run_target(t, objs, slab0)
            t.close()
            live.remove(t)
            print("%s: %.0f s %s" % (name, time.monotonic() - t0, json.dumps(res[name])),
                  file=sys.stderr)
            # a long run (1M objects: ~1.5 h) cut short keeps what it measured
            if o.json:
                save(o, res)
        report(o.objects, res)
        if o.json:
            save(o, res)
    except (benchlib.BenchError, OSError, subprocess.CalledProcessError) as e:
        print("bench_small: %s" % e, file=sys.stderr)
        rc = 1
    finally:
        for t in live:
            try:
                t.close()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                print("bench_small: cleanup of %s: %s" % (t.name, e), file=sys.stderr)
                rc = 1
        if not benchlib.CLEANUP.run():
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
