#!/usr/bin/env python3
"""
test_ray - Ray's object spilling onto spillway mounts, with a real local Ray.

Each test mounts spillway with a hot tier smaller than what Ray will spill,
then runs examples/integrations/ray_spill.py with the venv's Python
(tests/pydeps.sh; made here if missing, never skipped): ray.init with 2 CPUs,
a 96 MiB object store and object_spilling_config of type filesystem whose
directory_path is on the mount(s); producer tasks return NumPy arrays
totalling 400 MiB (> 4x the store), an aggregator ray.get()s every one and
checks every element. Asserted:

* the job succeeds and every object verifies;
* Ray's own counters (the raylet's store stats, as `ray memory --stats-only`)
  report spilled and restored bytes, at least the overflow of the store;
* the bytes went through spillway into segments on the cold tier: the
  mount's stats count them spilled (at least what Ray spilled minus the hot
  tier) and restored, segments were written, and the cold tier held
  segments while the job ran (sampled);
* Ray's spill files are gone from the mount once the refs are dropped (Ray
  deletes them) and after ray.shutdown, and spillway then frees their
  segments on the cold tier (polled with a deadline).

Runs: one spill directory with the cold tier on a local directory (nvme=);
a directory_path list naming directories on two mounts (Ray 2.60 uses only
the first entry - asserted, so an upgrade that changes it is noticed - and
that mount's two cold directories both receive segments); the cold tier on
S3 alone (the s3rver the S3 tests use, on loopback), with the spilling
config passed as raycluster.yaml passes it (RAY_object_spilling_config).

Where Ray alone fails, spillway does not: Ray spilling straight to a 128 MiB
tmpfs of the test's own hits ENOSPC, retries, and the job fails (asserted:
non-zero exit, objects not verified, ENOSPC / OutOfDiskError in its output);
the same job spilling into spillway with that tmpfs as nvme= and S3 below it
completes, every object verifies, and segments were demoted to S3.

The node spillway is for, a node whose RAM the job has taken: Ray (every
one of its processes) and the spillway daemon in one 1 GiB memory cgroup
(bench/tight.py, v1 or v2), 512 MiB of objects through a 96 MiB store and a
128 MiB hot tier with default options. Asserted: the job completes with
every object verified, the cgroup OOM-killed nothing, every Ray process
seen was inside the cgroup and the daemon saw its limit, the hot tier never
held more than hot_size (stats and the hot files' real allocation, sampled)
and ends within its budget, and everything spilled went through segments
that are freed afterwards.

Ray's processes (gcs_server, raylet, workers) carry a tag in their
environment; every one of them is killed at cleanup, on every exit path, and
the test fails if any outlives it.

Run: python3 test_ray.py --build BUILD_DIR [-k pattern]
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(TOP, "bench"))  # tight.py: the benches' memory cgroups
import harness  # noqa: E402
import tight  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.s3 import BUCKET, S3Server  # noqa: E402
from lib.tier import (Tmpfs, cold_read_bytes, cold_written_bytes, extent_bytes,  # noqa: E402
                      extents_in, seg_files, tmpfs_used)
from lib.venvpy import run_shell, venv_python  # noqa: E402

MiB = 1 << 20
RAY_SPILL = os.path.join(TOP, "examples", "integrations", "ray_spill.py")
AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
TAG_VAR = "SPW_RAY_TEST_TAG"
JOB_DEADLINE = 240.0  # seconds for one Ray job (init, produce, aggregate, shutdown)

# the scaled-down pipeline: 400 MiB of 8 MiB objects through a 96 MiB store
TOTAL = 400 * MiB
OBJECT = 8 * MiB
STORE = 96 * MiB
# the tight node: all of it in one memory cgroup (Ray alone peaks near 850 MiB)
TIGHT_CGROUP = 1 << 30
TIGHT_TOTAL = 512 * MiB


def s3_deps():
    """node and tests/s3's npm packages (spw_s3_deps), or a loud failure."""
    if shutil.which("node") and os.path.isdir(
            os.path.join(TOP, "tests", "s3", "node_modules", "@20minutes", "s3rver")):
        return
    r = run_shell('. "$1/tests/deps.sh" && spw_s3_deps "$1"', TOP, timeout=900)
    if r.returncode != 0:
        raise AssertionError("spw_s3_deps failed:\n%s" % r.stdout.decode(errors="replace"))


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def files_under(d):
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.join(root, n) for n in names]
    return sorted(out)


def _environ_has(pid, needle):
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


class Peak:
    """Samples fn() every interval in a thread; keeps the largest value. An
    observation of what was there while the job ran; nothing waits on it."""

    def __init__(self, fn, interval=0.1):
        self.fn, self.interval = fn, interval
        self.value = 0
        self.errors = []
        self.ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.ev.is_set():
            try:
                self.value = max(self.value, self.fn())
            except Exception as e:  # noqa: BLE001 - kept in .errors for the report
                self.errors.append(repr(e))
            self.ev.wait(self.interval)

    def stop(self):
        self.ev.set()
        self.t.join()
        return self.value


class RayJob:
    """ray_spill.py in the venv's Python, in its own session. Every process
    of the Ray session it starts inherits TAG_VAR=tag in its environment;
    stop() kills them all by pid. Registered first in the harness's live
    list, so a signal or watchdog cleanup ends Ray before it unmounts."""

    def __init__(self, py, dirs, tag, extra=(), cg=None):
        self.py = py
        self.cg = cg  # a tight.Cgroup the job (and so all of Ray) runs in
        self.dirs = list(dirs)
        self.tag = "%s-%s" % (tag, secrets.token_hex(6))
        self.mnt = "(ray job %s)" % self.tag  # the harness names helpers by .mnt
        self.tmp = harness.make_tmpdir()  # under /tmp: Ray's socket paths stay short
        self.json = os.path.join(self.tmp, "result.json")
        self.log = harness._log_path("ray")
        self.extra = list(extra)
        self.proc = None
        self.peak_pids = 0  # most tagged processes seen at once
        self.peak_outside = 0  # most of them seen outside self.cg at once
        self.leftover = []  # Ray pids still alive after the job ended

    def argv(self):
        return ([self.py, RAY_SPILL] + self.dirs +
                ["--total", str(TOTAL), "--object-size", str(OBJECT),
                 "--object-store", str(STORE), "--cpus", "2",
                 "--temp-dir", os.path.join(self.tmp, "ray"), "--json", self.json,
                 "--timeout", str(int(JOB_DEADLINE))] + self.extra)

    def env(self):
        e = {k: v for k, v in os.environ.items() if k not in AWS_ENV}
        e.update({TAG_VAR: self.tag, "RAY_USAGE_STATS_ENABLED": "0",
                  # no token file in the home directory for a throw-away cluster
                  "RAY_AUTH_MODE": "disabled", "PYTHONDONTWRITEBYTECODE": "1"})
        e.pop("RAY_ADDRESS", None)
        return e

    def run(self):
        """Run to the end; returns (exit status, result dict, output)."""
        with harness._live_lock:
            harness._live.insert(0, self)
        argv = self.argv()
        with open(self.log, "wb") as logf:
            logf.write(("$ %s\n" % " ".join(argv)).encode())
            logf.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf, env=self.env(),
                                         preexec_fn=self._preexec,
                                         start_new_session=True)
        # the tag must reach Ray's processes, or cleanup could not find them
        seen = Peak(lambda: len(self.pids()), interval=0.5)
        outside = Peak(self._outside, interval=0.5) if self.cg else None
        try:
            rc = self.proc.wait(timeout=JOB_DEADLINE + 60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the Ray job ran longer than %.0fs\n--- %s ---\n%s"
                                 % (JOB_DEADLINE + 60, self.log, harness.log_tail(self.log)))
        finally:
            self.peak_pids = seen.stop()
            self.peak_outside = outside.stop() if outside else 0
        # ray.shutdown ends the session's processes: allow them a bounded
        # time to go, then note (and later kill) whatever is left
        end = time.monotonic() + 20
        while self.pids() and time.monotonic() < end:
            time.sleep(0.05)
        self.leftover = self.pids()
        try:
            with open(self.json) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"ok": False}
        return rc, res, harness.log_tail(self.log, 80)

    def _preexec(self):
        harness._pdeathsig()
        if self.cg is not None:
            self.cg.preexec()

    def _outside(self):
        """Ray's processes that are not in the job's cgroup (gone ones aside)."""
        return sum(1 for p in self.pids() if self.cg.holds(p) is False)

    def pids(self):
        needle = ("%s=%s" % (TAG_VAR, self.tag)).encode()
        me = os.getpid()
        return sorted(int(d) for d in os.listdir("/proc")
                      if d.isdigit() and int(d) != me and _environ_has(d, needle)
                      and harness._pid_alive(int(d)))

    def _kill_all(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def abort(self):
        self._kill_all(signal.SIGKILL)

    def stop(self):
        """Kill every process of the session (TERM, then KILL); returns the
        pids that survived both (none, or the test fails)."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            if not self.pids() and (self.proc is None or self.proc.poll() is not None):
                break
            self._kill_all(sig)
            end = time.monotonic() + wait
            while self.pids() and time.monotonic() < end:
                time.sleep(0.02)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.wait()
        left = self.pids()
        with harness._live_lock:
            if self in harness._live:
                harness._live.remove(self)
        harness.remove_tmpdir(self.tmp)
        return left


class RayCase(SpwTestCase):
    timeout = 360

    @classmethod
    def setUpClass(cls):
        cls.py, versions = venv_python(["ray", "numpy"])
        cls.ray_version = versions["ray"]

    def cold_dir(self):
        d = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def _stop_job(self, job):
        left = job.stop()
        if left:
            raise AssertionError("Ray processes %s outlived SIGKILL" % left)

    def run_job(self, dirs, tag, extra=(), expect_ok=True, cg=None):
        job = self.job = RayJob(self.py, dirs, tag, extra, cg)
        # registered after the mounts: runs (kills Ray) before they unmount
        self.addCleanup(self._stop_job, job)
        t0 = time.monotonic()
        rc, res, out = job.run()
        dt = time.monotonic() - t0
        # the driver, gcs_server, raylet and workers at least
        self.assertGreaterEqual(job.peak_pids, 4, "the tag %s=%s reached only %d processes"
                                % (TAG_VAR, job.tag, job.peak_pids))
        if not expect_ok:
            self._stop_job(job)  # no Ray of this job competes with the next one
            with open(job.log, errors="replace") as f:
                full = f.read()
            sys.stderr.write("\n  [ray %s] %s: exit status %d after %.1fs: %s\n"
                             % (self.ray_version, tag, rc, dt, res.get("error")))
            return rc, res, full
        self.assertEqual(rc, 0, "ray_spill.py failed (status %s):\n%s" % (rc, out))
        self.assertTrue(res.get("ok"), "ray_spill.py says not ok: %s\n%s"
                        % (json.dumps(res), out))
        if job.leftover:
            sys.stderr.write("\n  [ray] %d Ray processes were still running 20s after "
                             "ray.shutdown: %s (killed at cleanup)\n"
                             % (len(job.leftover), job.leftover))
        r = res["ray"]
        sys.stderr.write("\n  [ray %s] %s: %d MiB through a %d MiB store in %.1fs "
                         "(produce %.1fs, aggregate %.1fs); Ray spilled %d MiB / %d objects, "
                         "restored %d MiB / %d objects\n"
                         % (self.ray_version, tag, res["total"] // MiB, STORE // MiB, dt,
                            res["produce_s"], res["aggregate_s"], r["spilled_bytes"] // MiB,
                            r["spilled_objects"], r["restored_bytes"] // MiB,
                            r["restored_objects"]))
        return res

    def check_ray(self, res, total=TOTAL):
        """What every run must show from Ray's side."""
        self.assertEqual(res["verified"], res["objects"], res)
        self.assertEqual(res["bad"], [])
        self.assertEqual(res["read_bytes"], total)
        r = res["ray"]
        self.assertEqual(r["fallback_bytes"], 0, "Ray fell back to its own mmap files: %s" % r)
        # the store holds at most STORE: the rest must have been spilled and,
        # to be read by the aggregator, restored
        self.assertGreaterEqual(r["spilled_bytes"], total - STORE, r)
        self.assertGreaterEqual(r["restored_bytes"], total - 2 * STORE, r)
        self.assertGreater(r["restored_objects"], 0, r)
        # the spill files were on the mount(s) while the job ran, and Ray
        # deleted them once the refs were dropped
        self.assertGreaterEqual(sum(res["peak_spill_bytes"]), r["spilled_bytes"] * 0.5, res)
        self.assertEqual(res["files_after_free"], 0, res)
        self.assertEqual(res["files_after_shutdown"], 0, res)

    def check_mount(self, m, before, res, share=1.0):
        """The mount's side: bytes spilled into segments and restored; Ray's
        files gone; the cold tier's segments freed."""
        s = stats(m.mnt)
        # to the cold tier: into segments, or whole spill files into extents
        # (extents=on, the default: the kernel then writes and reads them)
        spilled = cold_written_bytes(s) - cold_written_bytes(before)
        # read back from the cold tier: restored into RAM, or (admission:
        # a Ray restore reads each object once) straight from its segments
        # into the replies, which may be all of it (0 restored, 419 MB read
        # directly in one CI run); or opens of extents passed to the kernel
        restored = cold_read_bytes(s) - cold_read_bytes(before)
        ext_opens = s["extents"]["opens"] - before["extents"]["opens"]
        written = (s["segments"]["written"] - before["segments"]["written"]
                   + s["extents"]["created"] - before["extents"]["created"])
        limit = s["hot"]["hot_size"]
        ray_spilled = res["ray"]["spilled_bytes"] * share
        self.assertGreater(written, 0, json.dumps(s))
        self.assertGreaterEqual(spilled, ray_spilled - limit,
                                "spillway spilled %d of Ray's %d (hot tier %d): %s"
                                % (spilled, ray_spilled, limit, json.dumps(s)))
        self.assertTrue(restored > 0 or ext_opens > 0, json.dumps(s))
        self.assertEqual(s["errors"], {"io": 0, "crc": 0})
        self.assertEqual(s["enospc"], 0)
        self.assertEqual(files_under(m.mnt), [], "files left on the mount")
        # ray.shutdown removes its ray_spilled_objects_<node> directories too
        for d in res["dirs"]:
            if d.startswith(m.mnt + "/"):
                self.assertEqual(os.listdir(d), [], "left in Ray's spill dir %s" % d)
        # every spill file was deleted: spillway drops the segments that held
        # them (their live bytes are gone)
        harness.wait_until(lambda: stats(m.mnt)["segments"]["count"] == 0, 30,
                           "the cold tier's segments freed after Ray deleted its files "
                           "(%s)" % json.dumps(stats(m.mnt)["segments"]))
        self.assertEqual(stats(m.mnt)["extents"]["files"], 0, "extents left")
        for d in getattr(m, "cold", []):
            self.assertEqual(extents_in(d), [], "extents left in %s" % d)
        return spilled, restored

    def nvme_mount(self, hot_size, tag="mnt", ncold=1, prefix=(), hot_dir=None, **opts):
        cold = [self.cold_dir() for _ in range(ncold)]
        o = ["chunk_size=1M", "nvme=" + ":".join(cold), "min_spill_size=8M"]
        o += ["%s=%s" % kv for kv in opts.items()]
        m = self.mount(hot_size=hot_size, opts=o, tag=tag, prefix=prefix, hot_dir=hot_dir)
        m.cold = cold
        return m


class TestRaySpill(RayCase):
    def test_spill_onto_nvme_tier(self):
        """One spill dir on a 64 MiB hot tier with a local cold directory."""
        m = self.nvme_mount("64M")
        before = stats(m.mnt)
        peak_seg = Peak(lambda: sum(seg_files(m.cold[0]).values()) + extent_bytes(m.cold[0]))
        try:
            res = self.run_job([m.path("ray")], "nvme")
        finally:
            peak = peak_seg.stop()
        self.check_ray(res)
        spilled, restored = self.check_mount(m, before, res)
        # the overflow sat in segments or extents on the cold tier while the job ran
        self.assertGreaterEqual(peak, res["ray"]["spilled_bytes"] - 64 * MiB,
                                "cold tier held at most %d bytes" % peak)
        self.assertEqual(seg_files(m.cold[0]), {}, "segments left on the cold tier")
        sys.stderr.write("  [spillway] spilled %d MiB, restored %d MiB, cold tier peak %d MiB\n"
                         % (spilled // MiB, restored // MiB, peak // MiB))

    def test_two_spill_directories(self):
        """directory_path names directories on two mounts. Ray 2.60 spills
        to the first only (its node.py replaces a directory_path list by the
        first entry, for every node); that mount, with two cold directories,
        spreads the spilled segments over both - spillway's own answer to
        several disks. The second mount must get nothing and keep nothing."""
        m1 = self.nvme_mount("32M", tag="mnt1", ncold=2)
        m2 = self.nvme_mount("32M", tag="mnt2")
        b1, b2 = stats(m1.mnt), stats(m2.mnt)
        peaks = [Peak(lambda d=d: sum(seg_files(d).values()) + extent_bytes(d)) for d in m1.cold]
        try:
            res = self.run_job([m1.path("ray"), m2.path("ray")], "two-dirs")
        finally:
            peak = [p.stop() for p in peaks]
        self.check_ray(res)
        got = res["peak_spill_bytes"]
        self.assertGreater(got[0], 0, res)
        self.assertEqual(got[1], 0, "Ray %s spilled into the second directory_path entry "
                         "too (%s): it spreads spill files now; update this test, "
                         "ray_spill.py's help and examples/integrations/README.md"
                         % (self.ray_version, got))
        s1, _ = self.check_mount(m1, b1, res)
        for d, p in zip(m1.cold, peak):
            self.assertGreater(p, 0, "no segment or extent ever reached cold dir %s (peaks %s)"
                               % (d, peak))
            self.assertEqual(seg_files(d), {}, "segments left in %s" % d)
        self.assertGreaterEqual(sum(peak), res["ray"]["spilled_bytes"] - 32 * MiB, peak)
        s2 = stats(m2.mnt)
        self.assertEqual(cold_written_bytes(s2), cold_written_bytes(b2))
        self.assertEqual(files_under(m2.mnt), [])
        sys.stderr.write("  [spillway] spilled %d MiB; cold dirs peaked at %s MiB\n"
                         % (s1 // MiB, [p // MiB for p in peak]))


class TestRayTightNode(RayCase):
    """The node spillway is for: its RAM taken by the job. Ray and the
    daemon share one memory cgroup, so Ray's processes, its object store,
    the FUSE page cache of the spill files and the hot tier's tmpfs pages
    all count against one limit; the cgroup's OOM killer is the failure."""

    def _remove_cgroup(self, cg):
        if not cg.remove():
            raise AssertionError("%r could not be removed" % cg)

    def test_tight_node(self):
        cg = tight.create(TIGHT_CGROUP, "test-ray", cleanup=None)
        self.addCleanup(self._remove_cgroup, cg)  # registered first: runs last
        # hot_dir on a tmpfs of its own: its pages read at one instant
        # (statvfs), not a walk that may count a file before a punch and
        # another after the write that took the room
        hot = Tmpfs("512M")
        self.addCleanup(hot.stop)  # registered before the mount: unmounted after it
        m = self.nvme_mount("128M", tag="tight", prefix=cg.prefix(),
                            hot_dir=os.path.join(hot.mnt, "hot"))
        self.assertTrue(cg.holds(m.pid), "the daemon is not in %r" % cg)
        before = stats(m.mnt)
        hot_size = before["hot"]["hot_size"]
        base = tmpfs_used(hot.mnt)  # the daemon's lock and marker
        used = Peak(lambda: stats(m.mnt)["hot"]["used"])
        alloc = Peak(lambda: tmpfs_used(hot.mnt) - base)
        try:
            res = self.run_job([m.path("ray")], "tight", cg=cg,
                               extra=["--total", str(TIGHT_TOTAL)])
        finally:
            peak_used, peak_alloc = used.stop(), alloc.stop()
        u = cg.usage()
        self.assertEqual(u["oom_kills"], 0, "the cgroup OOM-killed: %s" % u)
        self.assertEqual(u["under_oom"], 0, u)
        self.check_ray(res, TIGHT_TOTAL)
        # all of Ray ran in the cgroup, and the daemon knew its limit
        self.assertEqual(self.job.peak_outside, 0, "Ray processes outside %r" % cg)
        s = stats(m.mnt)
        self.assertIn(s["pressure"]["cgroup"], (1, 2), json.dumps(s["pressure"]))
        self.assertEqual(s["pressure"]["cgroup_limit"], TIGHT_CGROUP, json.dumps(s["pressure"]))
        # the budget held: never above hot_size (the daemon's count and the
        # hot files' real allocation), and within the budget once the job is done
        for what, p in (("hot.used", peak_used), ("hot files allocated", peak_alloc)):
            self.assertLessEqual(p, hot_size, "%s reached %d > hot_size %d"
                                 % (what, p, hot_size))
        self.assertFalse(used.errors or alloc.errors, used.errors + alloc.errors)
        self.assertLessEqual(s["hot"]["used"], s["hot"]["limit"], json.dumps(s["hot"]))
        spilled, restored = self.check_mount(m, before, res)
        sys.stderr.write("  [tight] %r: peak %d MiB, %.1f CPU-s; spillway budget %d MiB, "
                         "hot peak %d MiB; spilled %d MiB, restored %d MiB\n"
                         % (cg, u["peak"] // MiB, u["user_s"] + u["sys_s"],
                            s["hot"]["limit"] // MiB, peak_used // MiB, spilled // MiB,
                            restored // MiB))


class S3RayCase(RayCase):
    def setUp(self):
        s3_deps()
        super().setUp()
        saved = {k: os.environ.get(k) for k in AWS_ENV}

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(restore)

    def s3server(self):
        srv = S3Server(tag="s3").start()
        self.addCleanup(srv.stop)
        # the daemon takes its credentials from the environment (harness.Mount
        # passes os.environ); the Ray job gets an environment without them
        os.environ["AWS_ACCESS_KEY_ID"] = srv.access_key
        os.environ["AWS_SECRET_ACCESS_KEY"] = srv.secret_key
        return srv

    def s3_opts(self, srv):
        return ["chunk_size=1M", "min_spill_size=8M", "s3=s3://%s/ray" % BUCKET,
                "s3_endpoint=" + srv.endpoint, "s3_path_style", "s3_part_size=5M",
                "state_dir=none"]


class TestRaySpillS3(S3RayCase):
    def test_spill_onto_s3_tier(self):
        """The cold tier on S3 alone (s3rver on loopback)."""
        srv = self.s3server()
        m = self.mount(hot_size="64M", opts=self.s3_opts(srv))
        before = stats(m.mnt)

        def on_s3():
            return sum(srv.objects("ray").values())

        peak_s3 = Peak(on_s3, interval=0.2)
        try:
            # object_spilling_config in RAY_object_spilling_config, as
            # examples/integrations/raycluster.yaml sets it
            res = self.run_job([m.path("ray")], "s3", extra=["--config-env"])
        finally:
            peak = peak_s3.stop()
        self.check_ray(res)
        self.assertEqual(res["config_via"], "env")
        spilled, restored = self.check_mount(m, before, res)
        self.assertGreaterEqual(peak, res["ray"]["spilled_bytes"] - 64 * MiB,
                                "S3 held at most %d bytes" % peak)
        harness.wait_until(lambda: on_s3() == 0, 30,
                           "segment objects deleted from S3 (%s)" % srv.objects("ray"))
        sys.stderr.write("  [spillway] spilled %d MiB to S3, restored %d MiB, S3 peak %d MiB\n"
                         % (spilled // MiB, restored // MiB, peak // MiB))


class TestRaySmallDisk(S3RayCase):
    """Where Ray alone fails, spillway does not: a 128 MiB disk (a tmpfs of
    the test's own) cannot take what the job spills."""

    timeout = 480

    def test_ray_alone_fails_spillway_completes(self):
        disk = Tmpfs("128M")
        self.addCleanup(disk.stop)  # registered before the mount: unmounted after it
        # 1. Ray spilling straight to the small disk: the spill workers hit
        # ENOSPC and retry (ray#17017); the aggregator never gets its objects
        rc, res, log = self.run_job([os.path.join(disk.mnt, "ray")], "alone",
                                    extra=["--timeout", "30"], expect_ok=False)
        self.assertNotEqual(rc, 0, "Ray alone completed on a 128 MiB disk: %s" % res)
        self.assertFalse(res.get("ok"), res)
        self.assertIn("error", res, res)
        self.assertLess(res["verified"], res["objects"], res)
        self.assertTrue("No space left on device" in log or "OutOfDiskError" in log,
                        "no sign of the full disk in the job's output:\n%s" % log[-3000:])
        for n in os.listdir(disk.mnt):  # whatever the failed job left behind
            shutil.rmtree(os.path.join(disk.mnt, n), ignore_errors=True)
        self.assertEqual(os.listdir(disk.mnt), [])

        # 2. The same job into spillway, with that disk as its nvme tier and
        # S3 below it: segments are demoted to S3 as the disk fills
        srv = self.s3server()
        m = self.mount(hot_size="64M", opts=self.s3_opts(srv) + ["nvme=" + disk.mnt])
        before = stats(m.mnt)
        peak_s3 = Peak(lambda: stats(m.mnt)["tiers"]["s3"], interval=0.2)
        try:
            res = self.run_job([m.path("ray")], "spillway")
        finally:
            peak = peak_s3.stop()
        self.check_ray(res)
        s = stats(m.mnt)
        self.assertGreater(s["segments"]["demoted"] - before["segments"]["demoted"], 0,
                           json.dumps(s))
        self.assertGreater(peak, 0, "nothing ever reached S3")
        spilled, restored = self.check_mount(m, before, res)
        harness.wait_until(lambda: sum(srv.objects("ray").values()) == 0, 30,
                           "segment objects deleted from S3 (%s)" % srv.objects("ray"))
        sys.stderr.write("  [spillway] spilled %d MiB (%d segments demoted to S3, S3 peak "
                         "%d MiB), restored %d MiB\n"
                         % (spilled // MiB, s["segments"]["demoted"], peak // MiB,
                            restored // MiB))


if __name__ == "__main__":
    harness.main()
