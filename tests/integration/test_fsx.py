#!/usr/bin/env python3
"""fsx on a real spillway mount.

Mounts spillway with a tiny hot tier (hot_size=16M, chunk_size=1M) and runs
tests/tools/spw_fsx (random pwrite/pread/truncate/punch/fallocate/mmap/
reopen/fsync, every read checked byte for byte against an in-memory model)
for 4 seeds x 25000 operations one after another on one mount, then for two
seeds at once (2 x 12500) on a fresh mount. Any mismatch prints the seed,
the last 50 operations and a replay command line; a daemon crash fails too.

    python3 tests/integration/test_fsx.py --build BUILD [--long]

Knobs (environment):
  SPW_FSX_LONG=1        millions of ops for manual runs (same as --long)
  SPW_FSX_SEEDS=a,b,c   seeds to run instead of the fixed ones
  SPW_FSX_OPS=N         operations per seed
  SPW_FSX_COLD=1        add a fresh NVMe cold tier (nvme=<temp dir under
                        /var/tmp>,min_spill_size=4M): files then exceed hot_size
  SPW_FSX_EXTRA_OPTS    extra mount options, comma-separated (e.g. nvme=DIR)
  SPW_FSX_ARGS          extra spw_fsx arguments (e.g. "-X otrunc" to step past
                        a known bug and look for the next one)
"""

import errno
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.fsx import CHUNK_SIZE, FsxRun, find_fsx  # noqa: E402

# The tiny hot tier. Extra options come from this one variable; COLD_TIER
# (on by default; SPW_FSX_COLD=0 turns it off) adds a fresh cold directory per
# mount, so the files together exceed hot_size and every operation races the
# evictor and restore.
HOT_SIZE = "16M"
EXTRA_OPTS = [o for o in os.environ.get("SPW_FSX_EXTRA_OPTS", "").split(",") if o]
COLD_TIER = os.environ.get("SPW_FSX_COLD", "1") not in ("", "0")
COLD_OPTS = ["min_spill_size=2M"]

# Without a cold tier the model must fit the hot tier: 4 files (lib.fsx NFILES) x 3 MiB =
# 12 MiB < 16M (and 2 runs x 4 files x 1.5 MiB when two run at once). With
# one (EXTRA_OPTS names nvme= or s3=) the files together exceed hot_size, so
# the evictor and restore paths are exercised.
HAS_COLD = COLD_TIER or any(o.startswith(("nvme=", "s3=")) for o in EXTRA_OPTS)
MAXLEN = "8M" if HAS_COLD else "3M"
MAXLEN_CONCURRENT = "8M" if HAS_COLD else "1536K"

QUICK = {"seeds": [1, 2, 3, 4], "ops": 25000, "concurrent_seeds": [5, 6],
         "concurrent_ops": 12500, "run_timeout": 150, "timeout": 400,
         "concurrent_timeout": 170}
LONG = {"seeds": [11, 12, 13, 14, 15, 16, 17, 18], "ops": 500000,
        "concurrent_seeds": [19, 20], "concurrent_ops": 500000,
        "run_timeout": 4 * 3600, "timeout": 24 * 3600, "concurrent_timeout": 4 * 3600}

LONG_MODE = os.environ.get("SPW_FSX_LONG", "") not in ("", "0")
if "--long" in sys.argv:
    sys.argv.remove("--long")
    LONG_MODE = True
PLAN = dict(LONG if LONG_MODE else QUICK)
if os.environ.get("SPW_FSX_SEEDS"):
    PLAN["seeds"] = [int(s) for s in re.split(r"[,\s]+", os.environ["SPW_FSX_SEEDS"].strip())
                     if s]
if os.environ.get("SPW_FSX_OPS"):
    PLAN["ops"] = PLAN["concurrent_ops"] = int(os.environ["SPW_FSX_OPS"])
CUSTOM = bool(os.environ.get("SPW_FSX_SEEDS") or os.environ.get("SPW_FSX_OPS"))


class TestFsx(harness.SpwTestCase):
    timeout = PLAN["timeout"]

    def setUp(self):
        if self._testMethodName == "test_concurrent":
            self.timeout = PLAN["concurrent_timeout"]
        super().setUp()
        self.fsx = find_fsx()
        self.assertIsNotNone(self.fsx, "spw_fsx is not built under %s" % harness.BUILD_DIR)
        self.good_dir = tempfile.mkdtemp(prefix="spw-fsx-good-")

    def tearDown(self):
        # kept (with the expected images) only when a run failed
        try:
            os.rmdir(self.good_dir)
        except OSError:
            print("expected images of the failed run kept in %s" % self.good_dir)

    def mount_opts(self):
        opts = ["chunk_size=" + CHUNK_SIZE] + EXTRA_OPTS
        if COLD_TIER:
            cold = tempfile.mkdtemp(prefix="spw-fsx-cold-", dir="/var/tmp")
            self.addCleanup(shutil.rmtree, cold, True)  # runs after the unmount
            opts += ["nvme=" + cold] + COLD_OPTS
        return opts

    def check_daemon(self, m, what):
        self.assertIsNone(m.proc.poll(), "spillway exited (status %s) during %s:\n%s"
                          % (m.proc.returncode, what, m.log_text()))
        self.assertTrue(harness.is_mounted(m.mnt), "mount vanished during %s" % what)

    def check_stats(self, m):
        """The root's stats xattr: no I/O or crc errors, no ENOSPC; with a cold
        tier, chunks really were spilled (else the runs proved nothing about
        eviction)."""
        try:
            raw = os.getxattr(m.mnt, "user.spillway.stats")
        except OSError as e:
            if HAS_COLD or e.errno not in (errno.ENOTSUP, errno.ENODATA):
                raise
            print("no user.spillway.stats (%s); skipping the stats checks" % e)
            return
        st = json.loads(raw.rstrip(b"\0").decode())
        print("stats: %s" % json.dumps(st, sort_keys=True), flush=True)
        errs = st.get("errors", {})
        self.assertEqual(errs.get("io", 0), 0, "I/O errors counted")
        self.assertEqual(errs.get("crc", 0), 0, "crc errors counted")
        self.assertEqual(st.get("enospc", 0), 0, "writes failed with ENOSPC")
        if HAS_COLD:
            self.assertGreater(st["spilled"]["chunks"], 0,
                               "files exceeded hot_size but nothing was spilled")

    def test_sequential(self):
        """4 seeds one after another on one mount (2 of them with mmap)."""
        opts = self.mount_opts()
        m = self.mount(hot_size=HOT_SIZE, opts=opts)
        total = 0
        for i, seed in enumerate(PLAN["seeds"]):
            run = FsxRun(self, self.fsx, m.mnt, seed, PLAN["ops"], MAXLEN, i % 2 == 1,
                         self.good_dir)
            total += run.finish(PLAN["run_timeout"])
            self.check_daemon(m, "seed %d" % seed)
        self.check_stats(m)
        if not CUSTOM:
            self.assertGreaterEqual(total, 100000)
        print("%d ops over seeds %s, maxlen %s, options hot_size=%s,%s"
              % (total, PLAN["seeds"], MAXLEN, HOT_SIZE, ",".join(opts)), flush=True)

    def test_concurrent(self):
        """Two seeds at once on one mount: the daemon's threads race."""
        m = self.mount(hot_size=HOT_SIZE, opts=self.mount_opts())
        seeds = PLAN["concurrent_seeds"]
        runs = [FsxRun(self, self.fsx, m.mnt, seed, PLAN["concurrent_ops"], MAXLEN_CONCURRENT,
                       i % 2 == 0, self.good_dir) for i, seed in enumerate(seeds)]
        deadline = time.monotonic() + PLAN["run_timeout"]
        for run in runs:
            run.finish(max(1, deadline - time.monotonic()))
        self.check_daemon(m, "seeds %s" % seeds)
        self.check_stats(m)

    def test_with_passthrough_readers(self):
        """Two seeds whose reopens hold a read-only open meanwhile (-P), while
        other threads keep opening their files read-only: a file all in RAM
        is then passed through, and fsx's own opens join as passthrough
        writers; every fsx read is still checked against its model."""
        m = self.mount(hot_size=HOT_SIZE, opts=self.mount_opts())
        stop = threading.Event()
        opened = [0]
        errors = []

        def holder(root):
            # open each file read-only, map and touch it, hold it a moment
            while not stop.is_set():
                for dirpath, _, names in os.walk(root):
                    for n in names:
                        try:
                            fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
                        except FileNotFoundError:
                            continue
                        except OSError as e:
                            errors.append("open %s: %s" % (n, e))
                            continue
                        try:
                            opened[0] += 1
                            os.pread(fd, 4096, 0)
                            stop.wait(0.02)
                        except OSError as e:
                            errors.append("read %s: %s" % (n, e))
                        finally:
                            os.close(fd)
        seeds = PLAN["concurrent_seeds"]
        runs = [FsxRun(self, self.fsx, m.mnt, seed + 100, PLAN["concurrent_ops"] // 2,
                       MAXLEN_CONCURRENT, i % 2 == 0, self.good_dir, extra=["-P"])
                for i, seed in enumerate(seeds)]
        holders = [threading.Thread(target=holder, args=(m.mnt,)) for _ in range(2)]
        for h in holders:
            h.start()
        try:
            deadline = time.monotonic() + PLAN["run_timeout"]
            for run in runs:
                run.finish(max(1, deadline - time.monotonic()))
        finally:
            stop.set()
            for h in holders:
                h.join()
        self.assertEqual(errors, [])
        self.check_daemon(m, "seeds with passthrough readers")
        self.check_stats(m)
        pt = json.loads(os.getxattr(m.mnt, "user.spillway.stats"))["passthrough"]
        print("passthrough: %s, holder opens %d" % (json.dumps(pt), opened[0]), flush=True)
        self.assertEqual(pt["on"], 1)
        self.assertGreater(pt["opens"], 0, "no open was passed through")
        self.assertEqual(pt["open"], 0)


if __name__ == "__main__":
    harness.main()
