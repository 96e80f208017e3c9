"""
lib.crash - a spillway daemon that can be killed and remounted on the same
state: CrashMount (harness.Mount with a given hot_dir kept across remounts,
an argv prefix such as fiu-run, kill -9 and a clean unmount whose exit status
the test checks itself), CrashCase (fresh hot/cold/state directories and
such mounts) and DurCase (CrashCase with the journal tests' options).
"""

import os
import shutil
import signal
import subprocess
import tempfile

import harness
from lib.tier import FileOps

HOT_SIZE = "64M"
CHUNK = "1M"


class CrashMount(harness.Mount):
    """harness.Mount with a given hot_dir (kept across remounts), an argv
    prefix (e.g. fiu-run ...), kill -9 and a clean unmount whose exit status
    the test checks itself."""

    def __init__(self, hot_dir, opts, tag, prefix=(), hot_size=HOT_SIZE, env=None):
        super().__init__(hot_size=hot_size, opts=opts, hot_dir=hot_dir, tag=tag, prefix=prefix,
                         env=env)
        self.exit_status = None

    def kill9(self):
        """SIGKILL the daemon, wait for it, lazily unmount the dead mount."""
        p = self.proc
        if p.poll() is not None:
            raise AssertionError("daemon on %s was already dead (status %s) before kill -9\n%s"
                                 % (self.mnt, p.returncode, self.log_text(30)))
        # the harness must not count this death as a crash
        self.killed_by_watchdog = True
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=harness.EXIT_DEADLINE)
        self.exit_status = p.returncode
        lazy_unmount(self.mnt)
        with open(self.log, "a") as f:
            f.write("\n[test] killed with SIGKILL and lazily unmounted\n")

    def unmount_clean(self):
        """fusermount3 -u, wait for the daemon to exit; its exit status."""
        p = self.proc
        rc, out, holders = harness.clean_unmount(self.mnt)
        if rc != 0:
            raise AssertionError("fusermount3 -u %s failed: %s (held by: %s)\n%s"
                                 % (self.mnt, out, "; ".join(holders) or "no process",
                                    self.log_text(30)))
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("daemon still running 30s after a clean unmount of %s\n%s"
                                 % (self.mnt, self.log_text(30)))
        self.killed_by_watchdog = True  # its exit is checked by the caller
        self.exit_status = p.returncode
        return p.returncode

    def log_all(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def lazy_unmount(mnt):
    if not harness.is_mounted(mnt):
        return
    subprocess.run(["fusermount3", "-uz", mnt], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=15)
    if harness.is_mounted(mnt):
        subprocess.run(["umount", "-l", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=15)
    if harness.is_mounted(mnt):
        raise AssertionError("could not lazily unmount the dead mount %s" % mnt)


class CrashCase(FileOps, harness.SpwTestCase):
    """Fresh state directories and CrashMounts on them, stopped at cleanup."""

    def make_state(self):
        """Fresh hot_dir (not yet existing, on /dev/shm), cold dir (disk) and
        state_dir path (not yet existing)."""
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        cold = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, cold, True)
        state = os.path.join(self.tmpdir(), "state")
        return hot, cold, state

    def cmount(self, hot, opts, tag, **kw):
        m = CrashMount(hot, opts, tag, **kw)
        m.start()
        self.addCleanup(self._stop_mount, m)
        return m


class DurCase(CrashCase):
    """CrashCase with the journal tests' options (test_durability.py,
    test_faults_fiu.py)."""

    timeout = 120

    def opts(self, cold, state=None, **extra):
        o = ["chunk_size=" + CHUNK, "nvme=" + cold]
        if "min_spill_size" not in extra:
            o.append("min_spill_size=4M")
        # these tests follow chunks into segments; the kill -9 rounds turn
        # extents on for every other fresh state themselves
        if "extents" not in extra:
            o.append("extents=off")
        if state is not None:
            o.append("state_dir=" + state)
        o += ["%s=%s" % (k, v) for k, v in extra.items()]
        return o
