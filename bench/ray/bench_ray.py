#!/usr/bin/env python3
"""
bench_ray - real Ray's object spilling, side by side in one run (issue 23):

  nospill        Ray with spilling turned off and the same small object store
  plain          Ray spilling to a plain directory on the cold disk
  spillway       Ray spilling onto a spillway mount (hot tier on /dev/shm,
                 nvme= a directory on the same cold disk), default options
  spillway-lazy  the same with restore=lazy
  spillway-s3    spillway with its cold tier on S3 alone (the tests' s3rver
                 on loopback, tests/s3)
  ray-s3         Ray's own S3 spilling (type smart_open, boto3) to the same
                 kind of s3rver

Each target runs examples/integrations/ray_spill.py with the venv's Python
(tests/pydeps.sh): producer tasks return NumPy arrays totalling --total
through an object store of --object-store; an aggregator ray.get()s every
one and verifies it. Per target: success (or the error), wall time, ray.get
latency p50/p99 over all objects, Ray's spill and restore throughput (its own
counters), peak node memory in use (MemTotal - MemFree, page cache and
tmpfs included, above the idle baseline), and CPU user/sys seconds per GiB
spilled of Ray's processes plus the spillway daemon (and the daemon alone).
Printed as a table with ratios to `plain`; --json keeps everything.

    sudo python3 bench/ray/bench_ray.py [--build build] [--total 4G] [--object-size 64M]
        [--object-store 512M] [--hot-size 512M] [--targets plain,spillway,...]
        [--cold-root /var/tmp] [--json FILE]

Needs root (FUSE mounts), the venv of tests/pydeps.sh (made if missing),
node and tests/s3's packages for spillway-s3. The machines are shared: read
the ratios, not the absolute numbers.
"""

import argparse
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib as bl  # noqa: E402

REPO = bl.REPO
RAY_SPILL = os.path.join(REPO, "examples", "integrations", "ray_spill.py")
S3RVER_JS = os.path.join(REPO, "tests", "s3", "s3rver.js")
TAG_VAR = "SPW_RAY_BENCH_TAG"
TARGETS = ("nospill", "plain", "spillway", "spillway-lazy", "spillway-s3", "ray-s3")
CLK = os.sysconf("SC_CLK_TCK")
MiB, GiB = bl.MiB, bl.GiB


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


def cpu_times(pid):
    """(user, sys) seconds of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) / CLK, int(fields[12]) / CLK
    except (OSError, IndexError, ValueError):
        return None


def mem_used():
    m = bl.meminfo(("MemTotal", "MemFree"))
    return m["MemTotal"] - m["MemFree"]


class Sampler:
    """Every 0.25 s: node memory in use (peak), and the CPU times of the
    tagged processes and the daemon (the last value seen per pid)."""

    def __init__(self, tag, daemon_pid):
        self.tag, self.daemon_pid = tag, daemon_pid
        self.base = mem_used()
        self.peak = 0
        self.cpu = {}
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def sample(self):
        self.peak = max(self.peak, mem_used() - self.base)
        pids = tagged_pids(self.tag) + ([self.daemon_pid] if self.daemon_pid else [])
        for pid in pids:
            c = cpu_times(pid)
            if c:
                self.cpu[pid] = c

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
                "daemon_user_s": d[0], "daemon_sys_s": d[1]}


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


def run_target(target, opts, py):
    tag = "%s-%s" % (target, secrets.token_hex(4))
    roots = bl.work_roots("rayb", opts)
    spill = os.path.join(roots["cold"], "spill")
    daemon = None
    s3 = None
    env_daemon = dict(os.environ)
    env_job = {}
    if target == "ray-s3":
        s3 = S3rver(opts.cold_root)
        spill = None
        # boto3 in Ray's IO workers: endpoint and credentials from the environment
        env_job = {"AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % s3.port,
                   "AWS_ACCESS_KEY_ID": s3.key, "AWS_SECRET_ACCESS_KEY": s3.key,
                   "AWS_DEFAULT_REGION": "us-east-1"}
    if target.startswith("spillway"):
        o = ["hot_dir=" + os.path.join(roots["shm"], "hot"), "hot_size=%d" % opts.hot_size]
        if target == "spillway-s3":
            s3 = S3rver(opts.cold_root)
            o += ["s3=s3://bench/ray", "s3_endpoint=http://127.0.0.1:%d" % s3.port,
                  "s3_path_style", "state_dir=none"]
            env_daemon.update(AWS_ACCESS_KEY_ID=s3.key, AWS_SECRET_ACCESS_KEY=s3.key)
        else:
            o.append("nvme=" + roots["cold"])
        if target == "spillway-lazy":
            o.append("restore=lazy")
        daemon = bl.start_daemon(target, [opts.spillway_bin, "-f", "-o", ",".join(o),
                                          roots["mnt"]], roots["mnt"],
                                 os.path.join(roots["logs"], "spillway.log"), env=env_daemon)
        spill = os.path.join(roots["mnt"], "ray")
    try:
        res = _run_job(target, opts, py, tag, roots, spill, daemon, env_job)
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


def _run_job(target, opts, py, tag, roots, spill, daemon, env_job):
    out = os.path.join(roots["logs"], "result.json")
    timeout = opts.timeout if target != "nospill" else opts.fail_timeout
    where = ["--spill-uri", "s3://bench/ray"] if spill is None else [spill]
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
    bl.log("%s: %s" % (target, " ".join(argv[1:])))
    samp = Sampler(tag, daemon.pid if daemon else None)
    t0 = time.monotonic()
    try:
        with open(os.path.join(roots["logs"], "job.log"), "w") as logf:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                               timeout=timeout * 3 + 120)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = None
    wall = time.monotonic() - t0
    cpu = samp.stop()
    kill_tagged(tag)
    try:
        with open(out) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"ok": False, "error": "no result (exit status %s)" % rc}
    st = None
    if daemon is not None:
        try:
            st = json.loads(os.getxattr(roots["mnt"], "user.spillway.stats"))
        except OSError:
            pass
    res.update(target=target, exit=rc, bench_wall_s=wall, cpu=cpu,
               spillway=st and {"spilled": st["spilled"]["bytes"],
                                "restored": st["restored"]["bytes"],
                                "segments_written": st["segments"]["written"]})
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


def fmt(v):
    if v is None:
        return "-"
    return "%.2f" % v if abs(v) < 10 else "%.0f" % v


def report(results):
    rows = {res["target"]: row(res) for res in results}
    head = ["target", "result"] + [c[1] for c in COLS]
    lines = []
    for res in results:
        r = rows[res["target"]]
        status = "ok" if r["ok"] else "FAILED: " + str(res.get("error", "?"))[:40]
        lines.append([res["target"], status] + [fmt(r[k]) for k, _ in COLS])
    bl.print_table(head, lines, left={0, 1})
    base = rows.get("plain")
    if base and base["ok"]:
        print("\nratios to plain (x > 1: larger than plain)")
        lines = []
        for res in results:
            if res["target"] == "plain" or not rows[res["target"]]["ok"]:
                continue
            r = rows[res["target"]]
            lines.append([res["target"], ""] + [bl.fmt_ratio(r[k], base[k]) for k, _ in COLS])
        if lines:
            bl.print_table(head, lines, left={0, 1})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                      os.path.join(REPO, "build")))
    ap.add_argument("--total", type=bl.parse_size, default=bl.parse_size("4G"))
    ap.add_argument("--object-size", type=bl.parse_size, default=bl.parse_size("64M"))
    ap.add_argument("--object-store", type=bl.parse_size, default=bl.parse_size("512M"))
    ap.add_argument("--min-spilling-size", type=bl.parse_size, default=bl.parse_size("100M"),
                    help="Ray's min_spilling_size (Ray's default 100M)")
    ap.add_argument("--hot-size", type=bl.parse_size, default=bl.parse_size("512M"))
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per job phase")
    ap.add_argument("--fail-timeout", type=int, default=120,
                    help="seconds per phase for nospill, which is expected to fail")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--cold-root", default="/var/tmp")
    ap.add_argument("--tmpfs-root", default="/dev/shm")
    ap.add_argument("--json")
    opts = ap.parse_args()
    opts.targets = [t for t in opts.targets.split(",") if t]
    for t in opts.targets:
        if t not in TARGETS:
            ap.error("unknown target %r (one of %s)" % (t, ", ".join(TARGETS)))
    opts.spillway_bin = os.path.join(os.path.abspath(opts.build), "spillway")
    opts.spillway_opts, opts.spillway_env = "", []
    results = []

    def body():
        py = venv_python(os.path.abspath(opts.build))
        env = bl.environment(opts)
        env["cold"] = bl.cold_fs(opts.cold_root)
        env["ray"] = bl.cmd_first_line([py, "-c", "import ray; print(ray.__version__)"])
        print("bench_ray: %s of %s objects through a %s object store; spillway hot tier %s"
              % (bl.fmt_size(opts.total), bl.fmt_size(opts.object_size),
                 bl.fmt_size(opts.object_store), bl.fmt_size(opts.hot_size)))
        for k, v in env.items():
            print("  %-8s %s" % (k, v))
        for t in opts.targets:
            results.append(run_target(t, opts, py))
            bl.CLEANUP.run()
            r = results[-1]
            bl.log("%s: %s in %.0fs" % (t, "ok" if r.get("ok") else "FAILED (%s)"
                                        % r.get("error"), r["bench_wall_s"]))
        print()
        rows = report(results)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"env": env, "opts": {k: v for k, v in vars(opts).items()},
                           "results": results, "rows": rows}, f, indent=1)

    return bl.run_guarded(body)


if __name__ == "__main__":
    sys.exit(main())
