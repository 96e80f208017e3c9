#!/usr/bin/env python3
"""
seed - the seed's own table, the four rows side by side in one run (issue 36),
scaled to the machine: every run inside one memory cgroup sized like a node
whose RAM the job takes (bench/tight.py), on a disk of the bench's own.

Columns (the same disk for every one: a loop-mounted ext4 image the bench
makes and removes, so its size is chosen; a sessions disk for the sessions
rows, a smaller spill disk for the crash row):

  tmpfs        sessions only: the RAM-only store (a tmpfs of the bench's own,
               larger than the cgroup: the cgroup is the limit) - the seed's "45"
  ray-default  Ray's defaults (spill threshold 0.8, min_spilling_size 100 MiB,
               4 IO workers) spilling to a plain directory on the disk;
               sessions: one plain directory
  ray-tuned    Ray tuned as the seed tunes it: threshold 0.75, min_spilling_size
               64 MiB, 8 IO workers, two spill directories on the same disk;
               sessions: two plain directories on the disk (one on each
               disk when --cold-root names several)
  spillway     Ray (defaults) spilling onto a spillway mount, nvme= a directory
               on the disk; sessions on the mount
  spillway-s3  the same with S3 below the small nvme directory (the tests'
               s3rver on loopback, outside the cgroup: a remote store)

Rows:

  crash     the seed's pipeline (examples/integrations/ray_spill.py: producers
            return 64 MiB arrays, an aggregator ray.get()s and verifies each)
            at 4x, 8x and 16x the object store, the spill disk smaller than
            what Ray must spill at 4x: the fraction of runs that fail, and how
            (Ray's error, the disk full with no progress, an OOM kill).
  sessions  examples/integrations/sessions.py: sessions of 32 MiB (KV caches,
            safetensors) resumed in a Zipf order, N raised level by level until
            a column fails (OOM kill, ENOSPC, a cache that does not verify) or
            the p99 resume passes --bound-ms: the largest N that passed.
  restore   sessions.py --cold-probe at a fixed N: sessions made cold (evicted,
            or their page cache dropped) and resumed one at a time:
            p50/p99/max to the first usable bytes and to the whole cache; and
            Ray's ray.get p99 at 4x (the whole object).
  cpu       user and sys CPU of every process in the cgroup (Ray's, the
            daemon's) as a share of the machine during the produce phase of
            the 8x crash run (the spill-heavy one), and CPU seconds per GiB of
            objects over the whole job.

    sudo python3 bench/seed/seed.py [--build build] [--rows crash,sessions,restore,cpu]
        [--columns ...] [--node-mem 1536M] [--object-store 256M] [--scales 4,8,16]
        [--runs 1] [--spill-disk 512M] [--sessions-disk 12G] [--levels 40,80,160,320,480]
        [--json FILE]

Needs root (FUSE, loop devices, cgroups), the venv of tests/pydeps.sh (made
if missing), node and tests/s3's packages (spillway-s3). Prints the four rows
with the seed's figures beside them and every run's details. The machine is
shared: read one run's ratios, not the absolute numbers.
"""

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "ray"))
import benchlib as bl  # noqa: E402
import bench_ray  # noqa: E402
import tight  # noqa: E402

MiB, GiB = bl.MiB, bl.GiB
REPO = bl.REPO
SESSIONS = os.path.join(REPO, "examples", "integrations", "sessions.py")
ROWS = ("crash", "sessions", "restore", "cpu")
COLUMNS = ("tmpfs", "ray-default", "ray-tuned", "spillway", "spillway-s3")
RAY_COLUMNS = COLUMNS[1:]
# the seed's figures (a 128 GB node, 4 NVMe drives, 400 GB of long-context tensors)
SEED = {"crash": ("100% (dies at step 65)", "0%"),
        "sessions": ("45 (bounded by RAM)", "350 (bounded by NVMe)"),
        "restore": ("420 ms", "38 ms"),
        "cpu": ("42%", "< 3%")}
# Ray's tuning as the seed gives it (system config entries, read by the
# raylet from RAY_<name> in its environment)
TUNED_ENV = {"RAY_object_spilling_threshold": "0.75", "RAY_max_io_workers": "8"}
TUNED_MIN_SPILL = 64 * MiB
DEFAULT_MIN_SPILL = 100 * MiB  # Ray's own default
FULL_STALL_S = 30  # the spill disk full this long, the job still running: failed
NCPU = os.cpu_count() or 1


# --------------------------------------------------------------------------
# Disks of the bench's own: a loop-mounted ext4 image (direct I/O on the
# image, so the host's page cache does not hold it for the cgroup)


class Disk:
    live = []

    def __init__(self, size, root, tag):
        fd, self.img = tempfile.mkstemp(prefix="spw-seed-%s-" % tag, suffix=".img", dir=root)
        os.close(fd)
        self.mnt = tempfile.mkdtemp(prefix="spw-seed-%s-disk-" % tag)
        self.dev = None
        Disk.live.append(self)
        with open(self.img, "wb") as f:
            f.truncate(size)
        self.dev = run(["losetup", "--direct-io=on", "--find", "--show", self.img]).strip()
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0",
             self.dev])
        run(["mount", "-t", "ext4", self.dev, self.mnt])
        self.size = size

    def sectors_read(self):
        try:
            with open("/sys/block/%s/stat" % os.path.basename(self.dev)) as f:
                return int(f.read().split()[2])
        except (OSError, ValueError, IndexError, TypeError):
            return None

    def avail(self):
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize

    def teardown(self):
        ok = True
        if bl.is_mounted(self.mnt):
            r = subprocess.run(["umount", self.mnt], capture_output=True, text=True)
            if r.returncode != 0:
                bl.log("umount %s: %s" % (self.mnt, r.stderr.strip()))
                ok = False
        if ok and self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
        if ok:
            for p in (self.img,):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass
            Disk.live.remove(self)
        return ok


class Tmpfs(Disk):
    def __init__(self, size, tag):
        self.mnt = tempfile.mkdtemp(prefix="spw-seed-%s-tmpfs-" % tag)
        self.dev, self.img = None, "/nonexistent"
        Disk.live.append(self)
        run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % size, "tmpfs", self.mnt])
        self.size = size


class Disks:
    """One Disk of `size` on each cold root (an NVMe each, on a real node)."""

    def __init__(self, size, roots, tag):
        self.v = []
        for r in roots:
            self.v.append(Disk(size, r, tag))
        self.size = size * len(self.v)
        self.mnt = self.v[0].mnt

    def nvme_dirs(self, tag):
        """A fresh directory on each disk (spillway's nvme=), held by CLEANUP."""
        return [bl.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-seed-%s-" % tag, dir=d.mnt))
                for d in self.v]

    def avail(self):
        return sum(d.avail() for d in self.v)

    def sectors_read(self):
        return sum(d.sectors_read() or 0 for d in self.v)

    def teardown(self):
        return all([d.teardown() for d in self.v])


def teardown_disks():
    for d in list(Disk.live):
        d.teardown()


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise bl.BenchError("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                 (r.stderr or r.stdout).strip()[-500:]))
    return r.stdout


# --------------------------------------------------------------------------
# What runs in the cgroup


class CpuSeries:
    """The cgroup's CPU seconds (user, sys) every 0.5 s, on CLOCK_MONOTONIC."""

    def __init__(self, cg):
        self.cg, self.v = cg, []
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while True:
            try:
                u = self.cg.usage()
                self.v.append((time.monotonic(), u["user_s"], u["sys_s"]))
            except OSError:
                pass
            if self.ev.wait(0.5):
                return

    def stop(self):
        self.ev.set()
        self.t.join()

    def between(self, a, b):
        """(user, sys) CPU seconds from a to b (interpolated), or None."""
        def at(x):
            v = self.v
            if not v or x < v[0][0] or x > v[-1][0]:
                return None
            for (t0, u0, s0), (t1, u1, s1) in zip(v, v[1:]):
                if t0 <= x <= t1:
                    f = (x - t0) / (t1 - t0) if t1 > t0 else 0
                    return u0 + f * (u1 - u0), s0 + f * (s1 - s0)
            return v[-1][1], v[-1][2]
        pa, pb = at(a), at(b)
        if pa is None or pb is None:
            return None
        return pb[0] - pa[0], pb[1] - pa[1]


class FullWatch:
    """The job is failed when it is stuck on a full spill disk: under 15%
    free, and for FULL_STALL_S nothing read from it nor restored by the
    mount (Ray's IO workers retry ENOSPC forever, ray#17017, and spillway's
    writers wait for room: the job would only end at its timeout). A job
    that progresses reads its spilled objects back, or the mount restores."""

    def __init__(self, disk, tag, mnt=None):
        self.disk, self.tag, self.mnt, self.fired = disk, tag, mnt, False
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def progress(self):
        st = bench_ray.spw_stats(self.mnt) if self.mnt else None
        return (self.disk.sectors_read(), st and st["restored"]["bytes"] +
                (st.get("admission") or {}).get("direct_read_bytes", 0))

    def loop(self):
        since, last = None, None
        while not self.ev.wait(1.0):
            now = self.progress()
            full = self.disk.avail() < self.disk.size * 15 // 100
            since = (since or time.monotonic()) if full and now == last else None
            last = now
            if since and time.monotonic() - since > FULL_STALL_S:
                self.fired = True
                bl.log("spill disk full, nothing read for %ds: the job is stuck, killing it"
                       % FULL_STALL_S)
                bench_ray.kill_tagged(self.tag)
                return

    def stop(self):
        self.ev.set()
        self.t.join()


def spillway_opts(opts, roots, cold, s3, hot_size):
    o = ["hot_dir=" + os.path.join(roots["shm"], "hot"), "hot_size=%d" % hot_size,
         "nvme=" + ":".join(cold)]
    if s3 is not None:
        o += ["s3=s3://bench/seed", "s3_endpoint=http://127.0.0.1:%d" % s3.port,
              "s3_path_style"]
    return o + [x for x in opts.spillway_opts.split(",") if x]


def start_spillway(col, opts, roots, cold, s3, hot_size, cg):
    env = dict(os.environ)
    if s3 is not None:
        env.update(AWS_ACCESS_KEY_ID=s3.key, AWS_SECRET_ACCESS_KEY=s3.key)
    o = spillway_opts(opts, roots, cold, s3, hot_size)
    return bl.start_daemon(col, [opts.spillway_bin, "-f", "-o", ",".join(o), roots["mnt"]],
                           roots["mnt"], os.path.join(roots["logs"], "spillway.log"), env=env,
                           preexec_fn=cg.preexec)


def crash_run(col, scale, opts, py, disk_size):
    """One run of the seed's pipeline at scale x the object store, spilling
    to disks of disk_size."""
    disk = Disks(disk_size, opts.cold_roots, "spill")
    s3 = daemon = None
    tag = "seed-%s-%s" % (col, secrets.token_hex(4))
    try:
        roots = bl.work_roots("seed", types.SimpleNamespace(cold_root=disk.mnt,
                                                            tmpfs_root=opts.tmpfs_root))
        if col == "spillway-s3":
            s3 = bench_ray.S3rver(opts.cold_roots[0])  # a remote store: outside the cgroup
        tight.drop_caches()
        cg = tight.create(opts.node_mem, col)
        env_job, min_spill = {}, DEFAULT_MIN_SPILL
        if col == "ray-default":
            spill = [os.path.join(roots["cold"], "spill")]
        elif col == "ray-tuned":
            spill = [os.path.join(roots["cold"], "spill%d" % i) for i in range(2)]
            env_job, min_spill = dict(TUNED_ENV), TUNED_MIN_SPILL
        else:
            daemon = start_spillway(col, opts, roots, disk.nvme_dirs("nvme"), s3, opts.hot_size,
                                    cg)
            spill = [os.path.join(roots["mnt"], "ray")]
        o = types.SimpleNamespace(total=scale * opts.object_store, object_size=opts.object_size,
                                  object_store=opts.object_store, min_spilling_size=min_spill,
                                  cpus=opts.cpus, timeout=opts.timeout,
                                  fail_timeout=opts.timeout, perf=None)
        series = CpuSeries(cg)
        watch = FullWatch(disk, tag, roots["mnt"] if daemon else None)
        try:
            res = bench_ray._run_job(col, o, py, tag, roots, spill, daemon, env_job, cg)
        finally:
            watch.stop()
            series.stop()
        res["disk_full_stall"] = watch.fired
        res["scale"] = scale
        res["column"] = col
        if "produce_t0" in res:
            a = res["produce_t0"]
            res["cpu_produce"] = series.between(a, a + res["produce_s"])
        return res
    finally:
        bench_ray.kill_tagged(tag)
        bl.CLEANUP.run()
        if s3 is not None:
            s3.stop()
        disk.teardown()


def how_failed(res):
    if res.get("ok"):
        return None
    u = res.get("tight") or {}
    if u.get("oom_kills"):
        return "OOM-killed (%d)" % u["oom_kills"]
    if res.get("disk_full_stall"):
        return "stuck on a full spill disk (%ds)" % FULL_STALL_S
    if res.get("error"):
        return res["error"][:60]
    if res.get("bad"):
        return "%d objects wrong" % len(res["bad"])
    return "exit %s" % res.get("exit")


def sessions_run(col, opts, py, levels, probe=0):
    """sessions.py in the cgroup on the column's store: a ramp over levels,
    or (probe) one level and a cold probe of that many sessions."""
    disk = Tmpfs(2 * opts.node_mem, "ram") if col == "tmpfs" else \
        Disks(opts.sessions_disk, opts.cold_roots, "sessions")
    s3 = None
    try:
        roots = bl.work_roots("seeds", types.SimpleNamespace(cold_root=disk.mnt,
                                                             tmpfs_root=opts.tmpfs_root))
        if col == "spillway-s3":
            s3 = bench_ray.S3rver(opts.cold_roots[0])
        tight.drop_caches()
        cg = tight.create(opts.node_mem, "sessions-" + col)
        if col in ("tmpfs", "ray-default"):
            dirs = [os.path.join(roots["cold"], "s")]
        elif col == "ray-tuned" and len(disk.v) > 1:
            dirs = disk.nvme_dirs("s")  # a node's drives: one directory on each
        elif col == "ray-tuned":
            dirs = [os.path.join(roots["cold"], "s%d" % i) for i in range(2)]
        else:
            start_spillway(col, opts, roots, disk.nvme_dirs("nvme"), s3, opts.sessions_hot, cg)
            dirs = [os.path.join(roots["mnt"], "s")]
        out = os.path.join(roots["logs"], "sessions.json")
        argv = [py, SESSIONS] + dirs + [
            "--sessions", ",".join(str(n) for n in levels), "--resumes", str(opts.resumes),
            "--warmup", str(opts.warmup), "--tokens", str(opts.tokens), "--zipf", str(opts.zipf),
            "--json", out]
        if probe:
            argv += ["--cold-probe", str(probe)]
        else:
            argv += ["--bound-ms", str(opts.bound_ms)]
        bl.log("sessions %s: %s in %r" % (col, " ".join(argv[2:]), cg))
        t0 = time.monotonic()
        with open(os.path.join(roots["logs"], "sessions.log"), "w") as logf:
            try:
                r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                   timeout=opts.timeout * 4, preexec_fn=cg.preexec)
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.monotonic() - t0
        usage = cg.usage()
        try:
            with open(out) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"levels": [], "ok": False, "stopped": "no result"}
        for lv in res.get("levels", []):
            lv.pop("records", None)  # the JSON of the bench stays readable
        if res.get("cold_probe"):
            res["cold_probe"].pop("records", None)
        done = [lv["sessions"] for lv in res.get("levels", [])]
        if rc != 0 and usage.get("oom_kills") and not res.get("stopped"):
            nxt = [n for n in levels if n not in done]
            res["stopped"] = "OOM-killed at N=%s" % (nxt[0] if nxt else "?")
        elif rc is None:
            res["stopped"] = "timed out"
        res.update(column=col, exit=rc, wall_s=wall, tight=usage)
        return res
    finally:
        bl.CLEANUP.run()
        if s3 is not None:
            s3.stop()
        disk.teardown()


# --------------------------------------------------------------------------
# The table


def fmt_ms(d, k="p99"):
    return "-" if not d else "%.0f" % d[k] if d[k] >= 10 else "%.1f" % d[k]


def table(results, opts):
    cols = [c for c in opts.columns]
    head = ["metric", "seed untuned", "seed tuned"] + cols
    rows = []
    crash = results.get("crash", {})
    if crash:
        line = ["crash rate (%s)" % "/".join("%dx" % s for s in opts.scales)] + list(SEED["crash"])
        for c in cols:
            rs = crash.get(c)
            if not rs:
                line.append("-")
                continue
            bad = [r for r in rs if not r.get("ok")]
            line.append("%d%% (%d/%d)" % (round(100 * len(bad) / len(rs)), len(bad), len(rs)))
        rows.append(line)
    ses = results.get("sessions", {})
    if ses:
        line = ["sessions per node (p99 <= %d ms)" % opts.bound_ms] + list(SEED["sessions"])
        for c in cols:
            r = ses.get(c)
            line.append("-" if not r else str(r.get("passed") or 0) +
                        ("+" if not r.get("stopped") else ""))
        rows.append(line)
    rst = results.get("restore", {})
    if rst:
        for what, key in (("P99 cold session back: first usable ms", "first_ms"),
                          ("P99 cold session back: whole ms", "whole_ms")):
            line = [what] + (list(SEED["restore"]) if key == "first_ms" else ["", ""])
            for c in cols:
                r = rst.get(c)
                cp = (r or {}).get("cold_probe") or {}
                line.append(fmt_ms(cp.get(key)) if cp.get(key) else "-")
            rows.append(line)
    cpu = results.get("cpu", {})
    if cpu:
        line = ["P99 ray.get @%dx ms (whole object)" % opts.cpu_scale, "", ""]
        for c in cols:
            g = (cpu.get(c) or {}).get("get_ms") or []
            line.append("%.0f" % bench_ray.pct(g, 99) if g else "-")
        rows.append(line)
    if cpu:
        line = ["CPU while spilling @%dx: user+sys %% (sys)" % opts.cpu_scale] + list(SEED["cpu"])
        line2 = ["CPU s per GiB of objects: user / sys", "", ""]
        line3 = ["Ray job wall s @%dx" % opts.cpu_scale, "", ""]
        for c in cols:
            r = cpu.get(c)
            cp = r and r.get("cpu_produce")
            if not cp or not r.get("produce_s"):
                line.append("-")
            else:
                share = (cp[0] + cp[1]) / (r["produce_s"] * NCPU) * 100
                line.append("%.0f%% (%.0f%%)" % (share, cp[1] / (r["produce_s"] * NCPU) * 100))
            u = r and r.get("tight")
            gib = (r or {}).get("total", 0) / GiB
            line2.append("%.2f / %.2f" % (u["user_s"] / gib, u["sys_s"] / gib)
                         if u and gib and r.get("ok") else "-")
            line3.append("%.0f" % r["wall_s"] if r and r.get("ok") else
                         "-" if not r else "FAILED")
        rows += [line, line2, line3]
    bl.print_table(head, rows, left={0})


def details(results, opts):
    runs = [(c, r) for c, rs in results.get("crash", {}).items() for r in rs]
    runs += [(c + " (cpu)", r) for c, r in results.get("cpu", {}).items()]
    print("\nRay runs (crash row on the spill disk; cpu row on the sessions disk):")
    for c, r in runs:
        u = r.get("tight") or {}
        print("  %-18s %3dx  %-6s wall %5.0fs  Ray spilled %5.0f MiB  cgroup peak %4.0f MiB  "
              "oom %d%s" % (c, r["scale"], "ok" if r.get("ok") else "FAILED",
                            r.get("bench_wall_s", 0),
                            ((r.get("ray") or {}).get("spilled_bytes") or 0) / MiB,
                            u.get("peak", 0) / MiB, u.get("oom_kills", 0),
                            "" if r.get("ok") else ": " + how_failed(r)))
    for row in ("sessions", "restore"):
        if not results.get(row):
            continue
        print("\n%s runs:" % row)
        for c, r in results[row].items():
            u = r.get("tight") or {}
            print("  %-12s passed N=%s, %s; cgroup peak %.0f MiB, oom %d, wall %.0fs"
                  % (c, r.get("passed"), r.get("stopped") or "the ramp's end",
                     u.get("peak", 0) / MiB, u.get("oom_kills", 0), r.get("wall_s", 0)))
            for lv in r.get("levels", []):
                sp = lv.get("spillway")
                print("    N=%-4d %.1f resumes/s, first usable p50/p99 %s/%s ms, whole "
                      "p50/p99/max %s/%s/%s ms%s"
                      % (lv["sessions"], lv.get("resumes_per_s") or 0,
                         fmt_ms(lv["first_ms"], "p50"), fmt_ms(lv["first_ms"]),
                         fmt_ms(lv["whole_ms"], "p50"), fmt_ms(lv["whole_ms"]),
                         fmt_ms(lv["whole_ms"], "max"),
                         "; in RAM %d/%d, passed through %d, warm %d/%d, read back/cold %s"
                         % (sp["hits"], lv["resumes"], sp["passthrough"],
                            sp["warm"]["passthrough"], sp["warm"]["resumes"],
                            "%.2fx" % sp["cold_read_per_cold_byte"]
                            if sp["cold_read_per_cold_byte"] else "-") if sp else ""))
            cp = r.get("cold_probe")
            if cp and "skipped" not in cp:
                print("    cold probe: %d sessions, first usable p50/p99/max %s/%s/%s ms, whole "
                      "%s/%s/%s ms%s" % (cp["resumes"], fmt_ms(cp["first_ms"], "p50"),
                                         fmt_ms(cp["first_ms"]), fmt_ms(cp["first_ms"], "max"),
                                         fmt_ms(cp["whole_ms"], "p50"), fmt_ms(cp["whole_ms"]),
                                         fmt_ms(cp["whole_ms"], "max"),
                                         ", read back %.2fx" % cp["cold_read_per_byte"]
                                         if cp.get("cold_read_per_byte") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                      os.path.join(REPO, "build")))
    ap.add_argument("--spillway", help="the spillway binary (default BUILD/spillway): e.g. "
                    "main's build, the venv still from --build")
    ap.add_argument("--spillway-rev", help="what --spillway was built from, for the report")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--columns", default=",".join(COLUMNS))
    ap.add_argument("--node-mem", type=bl.parse_size, default=bl.parse_size("1536M"),
                    help="the memory cgroup of every run (default 1536M)")
    ap.add_argument("--object-store", type=bl.parse_size, default=bl.parse_size("256M"))
    ap.add_argument("--object-size", type=bl.parse_size, default=bl.parse_size("64M"))
    ap.add_argument("--scales", default="4,8,16", help="totals, in object stores")
    ap.add_argument("--cpu-scale", type=int, default=8,
                    help="the cpu row's runs: this many object stores, on the sessions disk")
    ap.add_argument("--runs", type=int, default=1, help="crash runs per column and scale")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--hot-size", type=bl.parse_size, default=bl.parse_size("256M"),
                    help="spillway's hot tier under Ray (default 256M)")
    ap.add_argument("--sessions-hot", type=bl.parse_size, default=bl.parse_size("768M"),
                    help="spillway's hot tier under the sessions (default 768M)")
    ap.add_argument("--spillway-opts", default="mem_reserve=64M",
                    help="more mount options for every spillway column (default mem_reserve=64M)")
    ap.add_argument("--spill-disk", type=bl.parse_size, default=bl.parse_size("512M"),
                    help="the crash row's disk (default 512M: less than Ray spills at 4x)")
    ap.add_argument("--sessions-disk", type=bl.parse_size, default=bl.parse_size("12G"))
    ap.add_argument("--levels", default="16,32,48,64,96,160,320,480",
                    help="the sessions ramp (tmpfs: --tmpfs-levels)")
    ap.add_argument("--tmpfs-levels", default="8,16,24,32,40,48,56,64,72,80")
    ap.add_argument("--probe-sessions", type=int, default=64,
                    help="sessions of the restore row's run (default 64)")
    ap.add_argument("--probe", type=int, default=30, help="cold sessions it resumes")
    ap.add_argument("--resumes", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=1024, help="per session (1024: 32 MiB)")
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--bound-ms", type=float, default=200)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per job phase")
    ap.add_argument("--cold-root", default="/var/tmp",
                    help="where the disk images go, comma list: one disk per root (a node's "
                    "NVMe drives; the s3rver's objects on the first)")
    ap.add_argument("--tmpfs-root", default="/dev/shm")
    ap.add_argument("--json")
    opts = ap.parse_args()
    opts.rows = [r for r in opts.rows.split(",") if r]
    opts.cold_roots = [r for r in opts.cold_root.split(",") if r]
    for r in opts.cold_roots:
        if not os.path.isdir(r):
            ap.error("--cold-root: %s is not a directory" % r)
    opts.columns = [c for c in opts.columns.split(",") if c]
    for r in opts.rows:
        if r not in ROWS:
            ap.error("--rows: unknown row %r (one of %s)" % (r, ", ".join(ROWS)))
    for c in opts.columns:
        if c not in COLUMNS:
            ap.error("--columns: unknown column %r (one of %s)" % (c, ", ".join(COLUMNS)))
    try:
        opts.scales = [int(x) for x in opts.scales.split(",") if x]
        levels = [int(x) for x in opts.levels.split(",") if x]
        tlevels = [int(x) for x in opts.tmpfs_levels.split(",") if x]
    except ValueError:
        ap.error("--scales, --levels and --tmpfs-levels take comma lists of integers")
    opts.spillway_bin = os.path.abspath(opts.spillway or os.path.join(opts.build, "spillway"))
    if not os.access(opts.spillway_bin, os.X_OK):
        ap.error("--spillway: %s is not an executable (build first, or name one)"
                 % opts.spillway_bin)
    opts.targets = ["spillway"]
    results = {r: {} for r in opts.rows}

    def body():
        py = bench_ray.venv_python(os.path.abspath(opts.build))
        env = bl.environment(types.SimpleNamespace(
            targets=opts.targets, tmpfs_root=opts.tmpfs_root, spillway_bin=opts.spillway_bin,
            spillway_opts=opts.spillway_opts, spillway_env=[]))
        if opts.spillway:
            env["spillway"] = "%s (built from %s) with -o %s" % (
                opts.spillway_bin, opts.spillway_rev or "?", opts.spillway_opts)
        env["disk"] = "; ".join(bl.cold_fs(r) for r in opts.cold_roots) + \
            " (loop ext4 images on it, direct I/O)"
        env["ray"] = bl.cmd_first_line([py, "-c", "import ray; print(ray.__version__)"])
        probe = tight.create(opts.node_mem, "probe")
        env["cgroup"] = "one of %s per run (%s)" % (bl.fmt_size(opts.node_mem), probe.where)
        probe.remove()
        print("seed: the seed's table on this machine; every run in a memory cgroup of %s"
              % bl.fmt_size(opts.node_mem))
        for k, v in env.items():
            print("  %-8s %s" % (k, v))
        sys.stdout.flush()
        ray_cols = [c for c in opts.columns if c in RAY_COLUMNS]
        if "crash" in opts.rows:
            for k, scale in enumerate(opts.scales):
                for i in range(opts.runs):
                    order = ray_cols if (i + k) % 2 == 0 else ray_cols[::-1]
                    for c in order:
                        r = crash_run(c, scale, opts, py, opts.spill_disk)
                        bl.log("crash %s %dx: %s" % (c, scale, "ok" if r.get("ok")
                                                     else "FAILED: " + how_failed(r)))
                        results["crash"].setdefault(c, []).append(r)
        if "cpu" in opts.rows:
            for c in ray_cols[::-1]:
                r = crash_run(c, opts.cpu_scale, opts, py, opts.sessions_disk)
                bl.log("cpu %s %dx: %s" % (c, opts.cpu_scale, "ok" if r.get("ok")
                                           else "FAILED: " + how_failed(r)))
                results["cpu"][c] = r
        if "sessions" in opts.rows:
            for c in opts.columns:
                results["sessions"][c] = sessions_run(c, opts, py,
                                                      tlevels if c == "tmpfs" else levels)
                bl.log("sessions %s: N=%s (%s)" % (c, results["sessions"][c].get("passed"),
                                                   results["sessions"][c].get("stopped")))
        if "restore" in opts.rows:
            for c in opts.columns:
                if c == "tmpfs":
                    continue
                results["restore"][c] = sessions_run(c, opts, py, [opts.probe_sessions],
                                                     probe=opts.probe)
        print()
        table(results, opts)
        details(results, opts)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"env": env, "opts": {k: v for k, v in vars(opts).items()},
                           "results": results}, f, indent=1, default=str)

    return bl.run_guarded(body, catch=(tight.TightError, subprocess.SubprocessError),
                          after_cleanup=teardown_disks)


if __name__ == "__main__":
    sys.exit(main())
