#!/usr/bin/env python3
"""
bench_ray - real Ray's object spilling, side by side in one run (issues 23, 35):

  nospill        Ray with spilling turned off and the same small object store
  plain          Ray spilling to a plain directory on the cold disk
  plain-2dirs    Ray given two spill directories on that disk (Ray 2.60 uses
                 the first: its node.py keeps only directory_path[0])
  spillway       Ray spilling onto a spillway mount (hot tier on /dev/shm,
                 nvme= a directory on the same cold disk), default options
  spillway-lazy  the same with restore=lazy
  spillway-2dirs the same with nvme= two directories on that disk
  spillway-s3    spillway with its cold tier on S3 alone (the tests' s3rver
                 on loopback, tests/s3)
  ray-s3         Ray's own S3 spilling (type smart_open, boto3) to the same
                 kind of s3rver

A spillway target takes extra mount options after colons, as a target of
its own: spillway:mem_reserve=64M, spillway-lazy:hot_min=64M:io_workers=4.

Each target runs examples/integrations/ray_spill.py with the venv's Python
(tests/pydeps.sh): producer tasks return NumPy arrays totalling --total
through an object store of --object-store; an aggregator ray.get()s every
one and verifies it. Per target: success (or the error), wall time, ray.get
latency p50/p99 over all objects, Ray's spill and restore throughput (its own
counters), peak node memory in use (MemTotal - MemFree, page cache and
tmpfs included, above the idle baseline), and CPU user/sys seconds per GiB
spilled of Ray's processes plus the spillway daemon (and the daemon alone).
Printed as a table with ratios to `plain`; --json keeps everything.

--tight [SIZE] runs every target on the node spillway is for, a node whose
RAM the job has taken (issue 35): Ray and all its processes, and spillway's
daemon, in one memory cgroup of SIZE (bench/tight.py; default the object
store + 256 MiB for each of Ray's processes - the driver, raylet, GCS and a
worker per CPU - rounded up to 128 MiB: 1.5 GiB for the defaults below), so
the page cache cannot keep Ray's spill files and spillway's hot tier counts
against the same limit. Caches are dropped before each run; the s3rver
stands for a remote store and stays outside. Defaults in tight mode: the
issue's reference case (2 GiB of 64 MiB objects, a 200 MiB object store,
hot tier 256 MiB) and targets plain,spillway,plain-2dirs,spillway-2dirs,
ray-s3. Printed per target: the job's wall and data-phase time, CPU seconds
(user, sys) of every process in the cgroup per GiB of objects, the daemon's
own, the cgroup's peak memory, OOM kills, objects verified, and the ratios to
`plain`. --repeat N runs the targets N times, alternating their order, and
prints medians. --perf DIR records perf (cpu-clock, call graphs) of the
daemon and of the whole machine while each spillway target's job runs and,
with --tight, where the threads in the cgroup wait (sampled kernel stacks).

    sudo python3 bench/ray/bench_ray.py [--build build] [--total 4G] [--object-size 64M]
        [--object-store 512M] [--hot-size 512M] [--targets plain,spillway,...]
        [--cold-root /var/tmp] [--json FILE] [--tight [SIZE]] [--repeat N] [--perf DIR]

Needs root (FUSE mounts, cgroups), the venv of tests/pydeps.sh (made if
missing), node and tests/s3's packages for the S3 targets. The machines are
shared: read the ratios, not the absolute numbers.
"""

import argparse
import json
import os
import re
import secrets
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib as bl  # noqa: E402
import tight  # noqa: E402

REPO = bl.REPO
RAY_SPILL = os.path.join(REPO, "examples", "integrations", "ray_spill.py")
S3RVER_JS = os.path.join(REPO, "tests", "s3", "s3rver.js")
TAG_VAR = "SPW_RAY_BENCH_TAG"
TARGETS = ("nospill", "plain", "plain-2dirs", "spillway", "spillway-lazy", "spillway-2dirs",
           "spillway-s3", "ray-s3")
DEFAULT_TARGETS = ("nospill", "plain", "spillway", "spillway-lazy", "spillway-s3", "ray-s3")
TIGHT_TARGETS = ("plain", "spillway", "plain-2dirs", "spillway-2dirs", "ray-s3")
MiB, GiB = bl.MiB, bl.GiB
# the default cgroup of --tight: the object store plus this much for each of
# Ray's processes (a Python with Ray and NumPy imported: 150-250 MiB RSS)
TIGHT_PER_PROC = 256 * MiB
RAY_FIXED_PROCS = 3  # the driver, the raylet, the GCS; plus a worker per CPU


def parse_target(spec):
    """'spillway:mem_reserve=64M' -> ('spillway', ['mem_reserve=64M'])."""
    base, *extra = spec.split(":")
    if base not in TARGETS:
        raise ValueError("unknown target %r (one of %s)" % (base, ", ".join(TARGETS)))
    if extra and not base.startswith("spillway"):
        raise ValueError("target %r: only spillway targets take mount options" % spec)
    for e in extra:
        if not re.fullmatch(r"[a-z0-9_]+(=[^,:=]+)?", e):
            raise ValueError("target %r: bad mount option %r (name=value)" % (spec, e))
    return base, extra


def tight_size(object_store, cpus):
    """The default cgroup of --tight, rounded up to 128 MiB."""
    n = object_store + (RAY_FIXED_PROCS + cpus) * TIGHT_PER_PROC
    return -(-n // (128 * MiB)) * 128 * MiB


def venv_python(build):
    r = subprocess.run(["bash", "-c", '. "$1/tests/pydeps.sh" && spw_py_deps "$1" "$2"', "spw",
                        REPO, build], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise bl.BenchError("spw_py_deps failed:\n%s%s" % (r.stdout[-3000:], r.stderr[-3000:]))
    return os.path.join(build, "pyenv", "bin", "python")


def tagged_pids(tag):
    needle = ("%s=%s" % (TAG_VAR, tag)).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out


def mem_used():
    m = bl.meminfo(("MemTotal", "MemFree"))
    return m["MemTotal"] - m["MemFree"]


def spw_stats(mnt):
    try:
        return json.loads(os.getxattr(mnt, "user.spillway.stats"))
    except (OSError, ValueError):
        return None


class Sampler:
    """Every 0.25 s: node memory in use (peak), the CPU times of the tagged
    processes and the daemon (the last value seen per pid) and, with a
    spillway mount, its hot tier's use (peak) and budget (lowest)."""

    def __init__(self, tag, daemon_pid, mnt=None, cg=None):
        self.tag, self.daemon_pid, self.mnt = tag, daemon_pid, mnt
        self.watch = cg.watch() if cg else None
        self.base = mem_used()
        self.peak = 0
        self.cpu = {}
        self.hot_peak, self.budget_min = 0, None
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def sample(self):
        self.peak = max(self.peak, mem_used() - self.base)
        pids = tagged_pids(self.tag) + ([self.daemon_pid] if self.daemon_pid else [])
        for pid in pids:
            c = bl.cpu_times(pid)
            if c:
                self.cpu[pid] = c
        st = spw_stats(self.mnt) if self.mnt else None
        if st:
            self.hot_peak = max(self.hot_peak, st["hot"]["used"])
            lim = st["hot"]["limit"]
            self.budget_min = lim if self.budget_min is None else min(self.budget_min, lim)

    def run(self):
        while not self.ev.is_set():
            self.sample()
            self.ev.wait(0.25)

    def stop(self):
        self.sample()
        self.ev.set()
        self.t.join()
        tot = [sum(c[i] for c in self.cpu.values()) for i in (0, 1)]
        d = self.cpu.get(self.daemon_pid, (0.0, 0.0))
        return {"mem_peak": self.peak, "user_s": tot[0], "sys_s": tot[1],
                "daemon_user_s": d[0], "daemon_sys_s": d[1], "hot_used_peak": self.hot_peak,
                "hot_limit_min": self.budget_min,
                "working_set_peak": self.watch.stop() if self.watch else None}


class Perf:
    """perf record (cpu-clock: this VM has no hardware counters; call graphs)
    of the daemon and of the whole machine while a job runs."""

    def __init__(self, outdir, label, pid):
        self.procs = []
        base = os.path.join(outdir, re.sub(r"[^A-Za-z0-9_.=-]", "_", label))
        for what, target in (("daemon", ["-p", str(pid)]), ("all", ["-a"])):
            self.procs.append(subprocess.Popen(
                ["perf", "record", "-e", "cpu-clock", "-g", "-q", "-o",
                 "%s-%s.data" % (base, what)] + target,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)  # attached before the job starts

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Waits:
    """Where the job's threads wait (an off-CPU profile, --perf): about
    every 0.1 s, each thread of every process in the cgroup that is running
    (R), in uninterruptible sleep (D) or asleep in a FUSE request (a client
    waiting for the daemon; the daemon's idle readers of /dev/fuse left out)
    is counted under its process, state and the top of its kernel stack
    (/proc/PID/task/TID/stack). A count over the number of samples is the
    share of the run a thread spent there. The pids seen go to PATH.pids
    (for perf_split.py --pids)."""

    FRAMES = 6

    def __init__(self, path, cg, daemon_pid):
        self.path, self.cg, self.daemon_pid = path, cg, daemon_pid
        self.counts, self.n, self.seen = {}, 0, {}
        self.t0 = time.monotonic()
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def who(self, pid):
        if pid == self.daemon_pid:
            return "spillway"
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return "?"
        name = os.path.basename(argv[0].decode(errors="replace"))
        if any(b"ray_spill.py" in a for a in argv):
            return "driver"
        # a worker is python until Ray retitles it ray::IDLE, ray::produce...
        return "ray worker" if name.startswith(("python", "ray::")) else name

    def sample(self):
        for pid in self.cg.pids():
            who = self.seen.get(pid) or self.seen.setdefault(pid, self.who(pid))
            try:
                tids = os.listdir("/proc/%d/task" % pid)
            except OSError:
                continue
            for tid in tids:
                base = "/proc/%d/task/%s/" % (pid, tid)
                try:
                    with open(base + "stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                    with open(base + "comm") as f:
                        comm = f.read().strip()
                    with open(base + "stack") as f:
                        frames = [ln.split("]", 1)[-1].strip().split("+")[0]
                                  for ln in f.read().splitlines()]
                except OSError:
                    continue
                if state == "S" and (not any(fr.startswith("fuse_") for fr in frames)
                                     or "fuse_dev_do_read" in frames):
                    continue
                if state not in ("R", "D", "S"):
                    continue
                key = (who, re.sub(r"[0-9]+", "N", comm), state,
                       " < ".join(frames[:self.FRAMES]))
                self.counts[key] = self.counts.get(key, 0) + 1
        self.n += 1

    def run(self):
        while not self.ev.wait(0.1):
            self.sample()

    def stop(self):
        self.ev.set()
        self.t.join()
        secs = time.monotonic() - self.t0
        with open(self.path, "w") as f:
            f.write("%d samples in %.1f s; count, %% of the run, process, thread, state, kernel"
                    " stack (innermost first)\n" % (self.n, secs))
            for (who, comm, state, stack), c in sorted(self.counts.items(),
                                                       key=lambda kv: -kv[1]):
                f.write("%6d %5.1f%%  %-10s %-16s %s  %s\n" % (c, 100.0 * c / max(1, self.n),
                                                             who[:10], comm[:16], state, stack))
        with open(self.path + ".pids", "w") as f:
            f.write("".join("%d %s\n" % kv for kv in sorted(self.seen.items())))


def kill_tagged(tag):
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        pids = tagged_pids(tag)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while tagged_pids(tag) and time.monotonic() < end:
            time.sleep(0.05)


class S3rver:
    def __init__(self, root):
        self.dir = bl.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rayb-s3-", dir=root))
        self.key = "S3RVER"
        self.proc = subprocess.Popen(
            ["node", S3RVER_JS, "--dir", self.dir, "--port", "0", "--access-key", self.key,
             "--secret-key", self.key, "--bucket", "bench"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        buf, end = b"", time.monotonic() + 20
        while b"\n" not in buf:
            if time.monotonic() > end or self.proc.poll() is not None:
                self.stop()
                raise bl.BenchError("s3rver did not start")
            r, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if r:
                buf += os.read(self.proc.stdout.fileno(), 4096)
        self.port = int(re.match(rb"ready (\d+)", buf).group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run_target(spec, opts, py):
    base, extra = parse_target(spec)
    tag = "%s-%s" % (base, secrets.token_hex(4))
    roots = bl.work_roots("rayb", opts)
    spill = [os.path.join(roots["cold"], "spill")]
    if base == "plain-2dirs":
        spill = [os.path.join(roots["cold"], "spill%d" % i) for i in range(2)]
    daemon = None
    s3 = None
    cg = None
    env_daemon = dict(os.environ)
    env_job = {}
    if base in ("ray-s3", "spillway-s3"):
        s3 = S3rver(opts.cold_root)  # a remote store: outside the cgroup
    if opts.tight:
        tight.drop_caches()
        cg = tight.create(opts.tight, base)
    if base == "ray-s3":
        spill = None
        # boto3 in Ray's IO workers: endpoint and credentials from the environment
        env_job = {"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % s3.port,
                   "AWS_ACCESS_KEY_ID": s3.key, "AWS_SECRET_ACCESS_KEY": s3.key,
                   "AWS_DEFAULT_REGION": "us-east-1"}
    if base.startswith("spillway"):
        o = ["hot_dir=" + os.path.join(roots["shm"], "hot"), "hot_size=%d" % opts.hot_size]
        if base == "spillway-s3":
            o += ["s3=s3://bench/ray", "s3_endpoint=http://127.0.0.1:%d" % s3.port,
                  "s3_path_style", "state_dir=none"]
            env_daemon.update(AWS_ACCESS_KEY_ID=s3.key, AWS_SECRET_ACCESS_KEY=s3.key)
        elif base == "spillway-2dirs":
            cold = [os.path.join(roots["cold"], "nvme%d" % i) for i in range(2)]
            for d in cold:
                os.mkdir(d)
            o.append("nvme=" + ":".join(cold))
        else:
            o.append("nvme=" + roots["cold"])
        if base == "spillway-lazy":
            o.append("restore=lazy")
        o += extra
        daemon = bl.start_daemon(spec, [opts.spillway_bin, "-f", "-o", ",".join(o),
                                        roots["mnt"]], roots["mnt"],
                                 os.path.join(roots["logs"], "spillway.log"), env=env_daemon,
                                 preexec_fn=cg.preexec if cg else None)
        spill = [os.path.join(roots["mnt"], "ray")]
    try:
        res = _run_job(spec, opts, py, tag, roots, spill, daemon, env_job, cg)
        if s3 is not None:
            def left():
                objs = [os.path.join(r, n) for r, _, ns in os.walk(s3.dir) for n in ns
                        if n.endswith("._S3rver_object")]
                return {"objects": len(objs), "bytes": sum(os.path.getsize(o) for o in objs)}
            # spillway deletes a segment once Ray has deleted every file in it
            end = time.monotonic() + (15 if daemon is not None else 0)
            while left()["objects"] and time.monotonic() < end:
                time.sleep(0.1)
            res["s3_left"] = left()
        return res
    finally:
        kill_tagged(tag)
        if s3 is not None:
            bl.CLEANUP.run()  # unmount before the S3 server goes
            s3.stop()


def _run_job(target, opts, py, tag, roots, spill, daemon, env_job, cg):
    out = os.path.join(roots["logs"], "result.json")
    timeout = opts.timeout if target != "nospill" else opts.fail_timeout
    where = ["--spill-uri", "s3://bench/ray"] if spill is None else spill
    argv = [py, RAY_SPILL] + where + ["--total", str(opts.total), "--object-size",
            str(opts.object_size), "--object-store", str(opts.object_store),
            "--min-spilling-size", str(opts.min_spilling_size), "--cpus", str(opts.cpus),
            "--temp-dir", os.path.join(roots["logs"], "ray"), "--json", out,
            "--timeout", str(timeout)]
    if target == "nospill":
        argv.append("--no-spill")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({TAG_VAR: tag, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"})
    env.update(env_job)
    bl.log("%s: %s%s" % (target, " ".join(argv[1:]), " in %r" % cg if cg else ""))
    mnt = roots["mnt"] if daemon is not None else None
    perf = Perf(opts.perf, target, daemon.pid) if opts.perf and daemon is not None else None
    waits = (Waits(os.path.join(opts.perf, re.sub(r"[^A-Za-z0-9_.=-]", "_", target) +
                                "-waits.txt"), cg, daemon.pid if daemon else None)
             if opts.perf and cg is not None else None)
    samp = Sampler(tag, daemon.pid if daemon else None, mnt, cg)
    t0 = time.monotonic()
    try:
        with open(os.path.join(roots["logs"], "job.log"), "w") as logf:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                               timeout=timeout * 3 + 120,
                               preexec_fn=cg.preexec if cg else None)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if perf is not None:
            perf.stop()
        if waits is not None:
            waits.stop()
    wall = time.monotonic() - t0
    cpu = samp.stop()
    usage = cg.usage() if cg else None
    kill_tagged(tag)
    try:
        with open(out) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"ok": False, "error": "no result (exit status %s)" % rc}
    st = spw_stats(roots["mnt"]) if daemon is not None else None
    res.update(target=target, exit=rc, bench_wall_s=wall, cpu=cpu, tight=usage,
               spillway=st and {"spilled": st["spilled"]["bytes"],
                                "restored": st["restored"]["bytes"],
                                "segments_written": st["segments"]["written"],
                                "hot": st["hot"], "pressure": st["pressure"],
                                "write_waits": st["write_waits"],
                                "restore_waits": st["restore_waits"]})
    return res


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else None


def row(res):
    r = res.get("ray") or {}
    gib = (r.get("spilled_bytes") or 0) / GiB
    cpu = res["cpu"]
    per = (lambda v: v / gib) if gib > 0 else (lambda v: None)
    return {
        "ok": bool(res.get("ok")),
        "wall_s": res.get("wall_s"),
        "get_p50_ms": pct(res.get("get_ms") or [], 50),
        "get_p99_ms": pct(res.get("get_ms") or [], 99),
        "spill_MiBps": r["spilled_bytes"] / MiB / r["spill_s"] if r.get("spill_s") else None,
        "restore_MiBps": (r["restored_bytes"] / MiB / r["restore_s"]
                          if r.get("restore_s") else None),
        "spilled_MiB": (r.get("spilled_bytes") or 0) / MiB,
        "mem_peak_MiB": cpu["mem_peak"] / MiB,
        "user_s_per_GiB": per(cpu["user_s"]),
        "sys_s_per_GiB": per(cpu["sys_s"]),
        "daemon_sys_s_per_GiB": per(cpu["daemon_sys_s"]) if res.get("spillway") else None,
        "spillway_restored_MiB": (res["spillway"]["restored"] / MiB
                                  if res.get("spillway") else None),
        "s3_left_MiB": res["s3_left"]["bytes"] / MiB if res.get("s3_left") else None,
    }


COLS = [("wall_s", "wall s"), ("get_p50_ms", "get p50 ms"), ("get_p99_ms", "get p99 ms"),
        ("spill_MiBps", "spill MiB/s"), ("restore_MiBps", "restore MiB/s"),
        ("spilled_MiB", "spilled MiB"), ("mem_peak_MiB", "peak mem MiB"),
        ("user_s_per_GiB", "user s/GiB"), ("sys_s_per_GiB", "sys s/GiB"),
        ("daemon_sys_s_per_GiB", "daemon sys s/GiB"),
        ("spillway_restored_MiB", "spw restored MiB"),
        ("s3_left_MiB", "S3 left after job MiB")]


def tight_row(res):
    """One tight-mode run: CPU per GiB of objects (the same bytes for every
    target), from the cgroup's accounting of all its processes."""
    u = res.get("tight") or {}
    gib = (res.get("total") or 0) / GiB
    per = (lambda v: v / gib if v is not None else None) if gib > 0 else (lambda v: None)
    cpu, r, spw = res["cpu"], res.get("ray") or {}, res.get("spillway")
    data = (res["produce_s"] + res["aggregate_s"] if "produce_s" in res
            and "aggregate_s" in res else None)
    return {
        "ok": bool(res.get("ok")),
        "verified": res.get("verified", 0),
        "objects": res.get("objects", 0),
        "wall_s": res.get("wall_s"),
        "data_s": data,
        "get_p99_ms": pct(res.get("get_ms") or [], 99),
        "cpu_s_per_GiB": per(u["user_s"] + u["sys_s"]) if u else None,
        "user_s_per_GiB": per(u.get("user_s")),
        "sys_s_per_GiB": per(u.get("sys_s")),
        "daemon_s_per_GiB": (per(cpu["daemon_user_s"] + cpu["daemon_sys_s"])
                             if spw else None),
        "peak_MiB": u["peak"] / MiB if u else None,
        "ws_peak_MiB": cpu["working_set_peak"] / MiB if u else None,
        "oom_kills": u.get("oom_kills"),
        "stall_s": u.get("stall_some_s"),
        "spilled_MiB": (r.get("spilled_bytes") or 0) / MiB,
        "spw_spilled_MiB": spw["spilled"] / MiB if spw else None,
        "spw_restored_MiB": spw["restored"] / MiB if spw else None,
        "budget_MiB": (cpu["hot_limit_min"] / MiB
                       if spw and cpu.get("hot_limit_min") is not None else None),
        "hot_peak_MiB": cpu["hot_used_peak"] / MiB if spw else None,
    }


TIGHT_COLS = [("wall_s", "wall s"), ("data_s", "data s"), ("get_p99_ms", "get p99 ms"),
              ("cpu_s_per_GiB", "CPU s/GiB"), ("user_s_per_GiB", "user s/GiB"),
              ("sys_s_per_GiB", "sys s/GiB"), ("daemon_s_per_GiB", "daemon s/GiB"),
              ("peak_MiB", "cgroup peak MiB"), ("ws_peak_MiB", "working set peak MiB"),
              ("oom_kills", "OOM kills"),
              ("stall_s", "mem stall s"), ("spilled_MiB", "Ray spilled MiB"),
              ("spw_spilled_MiB", "spw spilled MiB"), ("spw_restored_MiB", "spw restored MiB"),
              ("budget_MiB", "spw budget min MiB"), ("hot_peak_MiB", "spw hot peak MiB")]
RATIO_COLS = ("wall_s", "data_s", "cpu_s_per_GiB", "user_s_per_GiB", "sys_s_per_GiB",
              "ws_peak_MiB")


def median_rows(results, rowfn):
    """{target: row} with each number the median over the target's runs, ok
    only if every run was, the worst verified and OOM count; and
    {target: [wall of each run]}."""
    runs = {}
    for res in results:
        runs.setdefault(res["target"], []).append(rowfn(res))
    out, walls = {}, {}
    for t, rs in runs.items():
        m = {}
        for k in rs[0]:
            vals = [x[k] for x in rs if isinstance(x[k], (int, float)) and
                    not isinstance(x[k], bool)]
            m[k] = statistics.median(vals) if vals else None
        m["ok"] = all(x["ok"] for x in rs)
        for k in ("verified",):
            if k in rs[0]:
                m[k] = min(x[k] for x in rs)
        if "oom_kills" in rs[0]:
            m["oom_kills"] = max((x["oom_kills"] or 0) for x in rs)
        out[t] = m
        walls[t] = [x["wall_s"] for x in rs]
    return out, walls


def fmt(v):
    if v is None:
        return "-"
    return "%.2f" % v if abs(v) < 10 else "%.0f" % v


def first_error(results, target):
    for res in results:
        if res["target"] == target and not res.get("ok"):
            return str(res.get("error", "?"))[:40]
    return "?"


def report(results, targets, tight_mode):
    rowfn, cols = (tight_row, TIGHT_COLS) if tight_mode else (row, COLS)
    rows, walls = median_rows(results, rowfn)
    head = ["target", "result"] + [c[1] for c in cols]
    lines = []
    for t in targets:
        r = rows[t]
        if tight_mode:
            status = "%s %d/%d" % ("ok" if r["ok"] else "FAILED", r["verified"], r["objects"])
        else:
            status = "ok" if r["ok"] else "FAILED: " + first_error(results, t)
        lines.append([t, status] + [fmt(r[k]) for k, _ in cols])
    bl.print_table(head, lines, left={0, 1})
    if any(len(w) > 1 for w in walls.values()):
        print("\nmedians of %d runs each; wall s of each run, in order: %s"
              % (max(len(w) for w in walls.values()),
                 "; ".join("%s %s" % (t, " ".join(fmt(x) for x in walls[t])) for t in targets)))
    base = rows.get("plain")
    if base and base["ok"]:
        print("\nratios to plain (x > 1: larger than plain)")
        rc = [c for c in cols if not tight_mode or c[0] in RATIO_COLS]
        head = ["target", ""] + [c[1] for c in rc]
        lines = []
        for t in targets:
            if t == "plain" or not rows[t]["ok"]:
                continue
            lines.append([t, ""] + [bl.fmt_ratio(rows[t][k], base[k]) for k, _ in rc])
        if lines:
            bl.print_table(head, lines, left={0, 1})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                      os.path.join(REPO, "build")))
    ap.add_argument("--total", type=bl.parse_size, help="default 4G; 2G with --tight")
    ap.add_argument("--object-size", type=bl.parse_size, default=bl.parse_size("64M"))
    ap.add_argument("--object-store", type=bl.parse_size,
                    help="default 512M; 200M with --tight")
    ap.add_argument("--min-spilling-size", type=bl.parse_size, default=bl.parse_size("100M"),
                    help="Ray's min_spilling_size (Ray's default 100M)")
    ap.add_argument("--hot-size", type=bl.parse_size, help="default 512M; 256M with --tight")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per job phase")
    ap.add_argument("--fail-timeout", type=int, default=120,
                    help="seconds per phase for nospill, which is expected to fail")
    ap.add_argument("--targets", help="comma list (default %s; with --tight %s)"
                    % (",".join(DEFAULT_TARGETS), ",".join(TIGHT_TARGETS)))
    ap.add_argument("--tight", nargs="?", const="auto", metavar="SIZE",
                    help="everything of a run in one memory cgroup of SIZE (default: the "
                         "object store + 256M per Ray process, rounded up to 128M)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, alternating the order")
    ap.add_argument("--perf", metavar="DIR", help="perf record of the daemon and the machine"
                    " during each spillway target (distorts the timings)")
    ap.add_argument("--cold-root", default="/var/tmp")
    ap.add_argument("--tmpfs-root", default="/dev/shm")
    ap.add_argument("--json")
    opts = ap.parse_args()
    t = opts.tight is not None
    opts.total = opts.total or bl.parse_size("2G" if t else "4G")
    opts.object_store = opts.object_store or bl.parse_size("200M" if t else "512M")
    opts.hot_size = opts.hot_size or bl.parse_size("256M" if t else "512M")
    if t:
        try:
            opts.tight = (tight_size(opts.object_store, opts.cpus) if opts.tight == "auto"
                          else bl.parse_size(opts.tight))
        except argparse.ArgumentTypeError as e:
            ap.error("--tight: %s" % e)
    opts.targets = [x for x in (opts.targets or ",".join(TIGHT_TARGETS if t else
                                                           DEFAULT_TARGETS)).split(",") if x]
    for x in opts.targets:
        try:
            parse_target(x)
        except ValueError as e:
            ap.error(str(e))
    if len(set(opts.targets)) != len(opts.targets):
        ap.error("a target named twice in --targets")
    if opts.repeat < 1:
        ap.error("--repeat: at least 1")
    if opts.perf:
        os.makedirs(opts.perf, exist_ok=True)
    opts.spillway_bin = os.path.join(os.path.abspath(opts.build), "spillway")
    opts.spillway_opts, opts.spillway_env = "", []
    results = []

    def body():
        py = venv_python(os.path.abspath(opts.build))
        env = bl.environment(opts)
        if any(x.startswith("spillway") for x in opts.targets) and "spillway" not in env:
            env["spillway"] = "%s (git %s)" % (opts.spillway_bin, bl.git_rev())
        env["cold"] = bl.cold_fs(opts.cold_root)
        env["ray"] = bl.cmd_first_line([py, "-c", "import ray; print(ray.__version__)"])
        if opts.tight:
            probe = tight.create(opts.tight, "probe")
            env["tight"] = ("one memory cgroup of %s per run: %s; caches dropped before each"
                            " run" % (bl.fmt_size(opts.tight), probe.where))
            bl.CLEANUP.run()
        print("bench_ray: %s of %s objects through a %s object store; spillway hot tier %s%s"
              % (bl.fmt_size(opts.total), bl.fmt_size(opts.object_size),
                 bl.fmt_size(opts.object_store), bl.fmt_size(opts.hot_size),
                 "; TIGHT node: %s cgroup" % bl.fmt_size(opts.tight) if opts.tight else ""))
        for k, v in env.items():
            print("  %-8s %s" % (k, v))
        for rnd in range(opts.repeat):
            order = opts.targets if rnd % 2 == 0 else opts.targets[::-1]
            for x in order:
                results.append(run_target(x, opts, py))
                bl.CLEANUP.run()
                r = results[-1]
                bl.log("%s: %s in %.0fs" % (x, "ok" if r.get("ok") else "FAILED (%s)"
                                            % r.get("error"), r["bench_wall_s"]))
        print()
        rows = report(results, opts.targets, bool(opts.tight))
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"env": env, "opts": {k: v for k, v in vars(opts).items()},
                           "results": results, "rows": rows}, f, indent=1)

    return bl.run_guarded(body, catch=(tight.TightError,))


if __name__ == "__main__":
    sys.exit(main())
