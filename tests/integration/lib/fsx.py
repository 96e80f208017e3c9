"""
lib.fsx - spw_fsx (tests/tools/spw_fsx.c) on a spillway mount: find_fsx()
finds the binary in the build, FsxRun runs one seed on its own directory
under the mount and fails the test unless it printed its ok line.
tiny_tier() runs seeds one after another on a mount with a 16 MiB hot tier
and a cold tier, so every operation races the evictor. Used by
test_fsx.py, test_faultin.py, test_overlay.py and test_admission.py.
"""

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time

import harness

NFILES = 4  # files per run
CHUNK_SIZE = "1M"  # the mounts' chunk_size, also fsx's block size (-b)
FSX_ARGS = shlex.split(os.environ.get("SPW_FSX_ARGS", ""))  # extra spw_fsx arguments


def find_fsx():
    for p in (os.path.join(harness.BUILD_DIR, "tests", "spw_fsx"),
              os.path.join(harness.BUILD_DIR, "spw_fsx")):
        if os.access(p, os.X_OK):
            return p
    return None


class FsxRun:
    """One spw_fsx process on its own directory under the mount."""

    def __init__(self, test, fsx, mnt, seed, ops, maxlen, use_mmap, good_dir, extra=()):
        self.seed, self.ops = seed, ops
        self.dir = os.path.join(mnt, "fsx-%d" % seed)
        os.mkdir(self.dir)
        self.cmd = [fsx, "-q", "-S", str(seed), "-N", str(ops), "-f", str(NFILES), "-l",
                    maxlen, "-b", CHUNK_SIZE] + (["-m"] if use_mmap else []) + list(extra)
        self.cmd += FSX_ARGS
        self.cmd.append(self.dir)
        print("\n$ %s" % " ".join(self.cmd), flush=True)
        self.good_dir = good_dir
        env = dict(os.environ, TMPDIR=good_dir)  # where failure images go
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        # registered after the mount's cleanup, so it runs before it
        test.addCleanup(self.kill)
        self.test = test

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def finish(self, timeout):
        """Wait for the run; fail the test unless it printed its ok line."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, _ = self.proc.communicate()
            self.test.fail("spw_fsx seed %d did not finish within %ds:\n%s"
                           % (self.seed, timeout, out.decode(errors="replace")))
        out = out.decode(errors="replace")
        dt = time.monotonic() - self.t0
        ok_line = "spw_fsx: %d ops ok, seed %d" % (self.ops, self.seed)
        if self.proc.returncode != 0 or ok_line not in out:
            self.test.fail("spw_fsx seed %d failed (exit %d after %.1fs; expected images, if "
                           "any, in %s):\n%s" % (self.seed, self.proc.returncode, dt,
                                                self.good_dir, out))
        print("seed %d: %d ops ok in %.1fs" % (self.seed, self.ops, dt), flush=True)
        # spw_fsx unlinks its files at the end; nothing may be left.
        self.test.assertEqual(os.listdir(self.dir), [], "files left in %s" % self.dir)
        os.rmdir(self.dir)
        return self.ops


def tiny_tier(test, runs, opts=(), timeout=150):
    """spw_fsx runs, one after another, on one mount of test with a 16 MiB
    hot tier and a cold directory (1 MiB chunks, min_spill_size 2M, extra
    mount options opts): runs is [(seed, ops, use_mmap, extra args)]. Each
    must print its ok line; the mount's stats afterwards (returned) must show
    no I/O or crc error and chunks spilled."""
    fsx = find_fsx()
    test.assertIsNotNone(fsx)
    cold = tempfile.mkdtemp(prefix="spw-fsx-cold-", dir="/var/tmp")
    test.addCleanup(shutil.rmtree, cold, True)
    good = tempfile.mkdtemp(prefix="spw-fsx-good-")
    m = test.mount(hot_size="16M", opts=["chunk_size=" + CHUNK_SIZE, "nvme=" + cold,
                                         "min_spill_size=2M"] + list(opts))
    for seed, ops, use_mmap, extra in runs:
        FsxRun(test, fsx, m.mnt, seed, ops, "8M", use_mmap, good, extra=extra).finish(timeout)
    try:
        os.rmdir(good)
    except OSError:
        pass
    st = json.loads(os.getxattr(m.mnt, "user.spillway.stats"))
    test.assertEqual(st["errors"], {"io": 0, "crc": 0})
    test.assertGreater(st["spilled"]["chunks"], 0)
    return st
