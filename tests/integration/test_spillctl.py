#!/usr/bin/env python3
"""
test_spillctl - the operator CLI (mount-helpers/spillctl) against live mounts
with a small hot tier and a cold directory.

stats (--json checked against what was written and against the daemon's own
xattr; the human view's fill bars; --watch), status (chunk counts, -r, JSON),
pin/unpin, evict/warm (residency and content afterwards, a pinned file's
failure reported while the others are done), the progress bar on a
pseudo-terminal and silence without one, the choice of the default mount,
and the errors: a path not on a spillway mount, a missing path, a directory
without -r, a mount without a cold tier, a stopped daemon (not answering,
within --timeout) and a dead one, fsck, usage errors. Exit statuses throughout.

Run: python3 test_spillctl.py --build BUILD_DIR [-k pattern]
"""

import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.data import sha_file  # noqa: E402
from lib.tier import file_state as state  # noqa: E402

MiB = 1 << 20
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPILLCTL = os.path.join(TOP, "mount-helpers", "spillctl")
RUN_DEADLINE = 30  # seconds for one spillctl run


def fill(path, size, seed):
    """Write size reproducible bytes; returns their sha256."""
    block = hashlib.sha256(b"%d" % seed).digest() * (MiB // 32)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = block[:min(left, len(block))]
            f.write(b)
            h.update(b)
            left -= len(b)
    return h.hexdigest()


class Result:
    def __init__(self, rc, out, err, secs):
        self.rc, self.out, self.err, self.secs = rc, out, err, secs

    def __repr__(self):
        return "exit %s after %.1fs\n--- stdout ---\n%s--- stderr ---\n%s" % (
            self.rc, self.secs, self.out, self.err)


def ctl(*args, env=None, timeout=RUN_DEADLINE):
    """Run spillctl with pipes (not a terminal)."""
    e = dict(os.environ)
    e.pop("SPILLCTL_MOUNTINFO", None)
    e.pop("SPILLCTL_TIMEOUT", None)
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, SPILLCTL] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError("spillctl %s did not finish within %ss:\n%s%s"
                             % (" ".join(args), timeout, out.decode(errors="replace"),
                                err.decode(errors="replace")))
    return Result(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                  time.monotonic() - t0)


def ctl_tty(*args, timeout=RUN_DEADLINE):
    """Run spillctl with stdout and stderr on a pseudo-terminal; returns
    (exit status, everything it wrote to the terminal)."""
    master, slave = os.openpty()
    try:
        p = subprocess.Popen([sys.executable, SPILLCTL] + list(args), stdin=subprocess.DEVNULL,
                             stdout=slave, stderr=slave, start_new_session=True)
    finally:
        os.close(slave)
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                raise AssertionError("spillctl %s on a tty did not finish: %r" % (args, buf))
            r, _, _ = select.select([master], [], [], 0.2)
            if not r:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every slave end is closed, the child is done
                break
            if not chunk:
                break
            buf += chunk
        return p.wait(timeout=timeout), buf.decode(errors="replace")
    finally:
        os.close(master)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


class CtlCase(SpwTestCase):
    """A mount with a 32 MiB hot tier, 1 MiB chunks and one cold directory."""

    timeout = 90

    def cold_dir(self):
        d = tempfile.mkdtemp(prefix="spw-ctl-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def setUp(self):
        super().setUp()
        self.cold = self.cold_dir()
        self.m = self.mount(hot_size="32M", opts=["chunk_size=1M", "min_spill_size=4M",
                                                   "nvme=" + self.cold])
        self.mnt = self.m.mnt

    def p(self, *parts):
        return self.m.path(*parts)

    def stats(self):
        return json.loads(os.getxattr(self.mnt, "user.spillway.stats"))

    def assertOk(self, r, quiet=False):
        self.assertEqual(r.rc, 0, r)
        if quiet:
            self.assertEqual((r.out, r.err), ("", ""), r)

    def assertFails(self, r, *needles, rc=1):
        self.assertEqual(r.rc, rc, r)
        for n in needles:
            self.assertIn(n, r.err, r)

    def populate(self):
        """a (3 MiB), d/b (2 MiB), d/e/c (10 KiB), a symlink and a fifo."""
        os.makedirs(self.p("d", "e"))
        self.sums = {"a": fill(self.p("a"), 3 * MiB, 1), "d/b": fill(self.p("d", "b"), 2 * MiB, 2),
                     "d/e/c": fill(self.p("d", "e", "c"), 10 * 1024, 3)}
        os.symlink("a", self.p("link"))
        os.mkfifo(self.p("d", "fifo"))


# --------------------------------------------------------------------------


class TestStats(CtlCase):

    def test_json_matches_what_was_written(self):
        self.populate()
        r = ctl("stats", self.mnt, "--json")
        self.assertOk(r)
        s = json.loads(r.out)
        self.assertEqual(s["files"], 3, s)
        self.assertEqual(s["inodes"], 8, s)  # the root, 2 directories, 3 files, link, fifo
        self.assertEqual(s["hot"]["limit"], 32 * MiB)
        self.assertGreaterEqual(s["hot"]["used"], 5 * MiB, s)
        self.assertLessEqual(s["hot"]["used"], s["hot"]["limit"])
        self.assertEqual([c["dir"] for c in s["cold"]], [os.path.realpath(self.cold)])
        # the same object the daemon gives (re-dumped, nothing invented or lost)
        direct = self.stats()
        self.assertEqual(sorted(s), sorted(direct))
        for k in ("files", "inodes", "hot", "segments", "tiers", "errors"):
            self.assertEqual(s[k], direct[k], k)
        # any path on the mount names it
        r2 = ctl("stats", self.p("d", "e"), "--json")
        self.assertOk(r2)
        self.assertEqual(json.loads(r2.out)["files"], 3)

    def test_human_view_has_fill_bars(self):
        self.populate()
        s = self.stats()
        r = ctl("stats", self.mnt)
        self.assertOk(r)
        self.assertEqual(r.err, "")
        m = re.search(r"^  RAM \(hot\) +\[(#*)(-*)\] +(\d+)%  (.*) of 32\.0 MiB", r.out, re.M)
        self.assertTrue(m, r)
        frac = s["hot"]["used"] / s["hot"]["limit"]
        self.assertEqual(len(m.group(1)) + len(m.group(2)), 20)
        self.assertEqual(len(m.group(1)), int(round(frac * 20)), r)
        self.assertEqual(int(m.group(3)), int(round(frac * 100)), r)
        self.assertRegex(r.out, r"(?m)^  nvme +\[[#-]{20}\] +\d+%%  .* used, .* free  %s$"
                         % re.escape(os.path.realpath(self.cold)))
        self.assertRegex(r.out, r"(?m)^  files +3 \(8 inodes\)$")
        self.assertRegex(r.out, r"(?m)^  segments +0 holding 0 B")
        self.assertRegex(r.out, r"(?m)^  errors +io 0, crc 0$")
        for word in ("spilled", "restored", "writers"):
            self.assertRegex(r.out, r"(?m)^  %s " % word)
        pt = s["passthrough"]
        self.assertRegex(r.out, r"(?m)^  passthru +%d open now, %d opens read by the kernel "
                         % (pt["open"], pt["opens"]))

    def test_watch_rates_between_samples(self):
        fill(self.p("f"), 4 * MiB, 4)
        r = ctl("stats", self.mnt, "--watch", "0.2", "--count", "3")
        self.assertOk(r)
        self.assertEqual(r.out.count("RAM (hot)"), 3, r)
        # the first sample has only the daemon's average, the later ones a rate now
        self.assertEqual(len(re.findall(r"(?m)^  spilled .*, now ", r.out)), 2, r)
        r = ctl("stats", self.mnt, "--json", "--watch", "0.1", "--count", "2")
        self.assertOk(r)
        lines = r.out.splitlines()
        self.assertEqual(len(lines), 2, r)
        self.assertEqual([json.loads(x)["files"] for x in lines], [1, 1])

    def test_default_mount_is_the_only_one(self):
        """Without MOUNT: the only spillway mount, an error for none or several
        (a made-up mount table, so other tests' mounts do not matter)."""
        real = os.path.realpath(self.mnt)
        mine, others = None, []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                fstype = fields[fields.index("-", 6) + 1]
                if fstype == "fuse.spillway":
                    if harness._unescape_mount_field(fields[4]) == real:
                        mine = line
                else:
                    others.append(line)
        self.assertIsNotNone(mine, "the mount is not in /proc/self/mountinfo")
        fake = mine.split()
        fake[2], fake[4] = "0:999999", "/nonexistent/spw-fake-mnt"
        d = self.tmpdir()

        def table(name, lines):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.writelines(lines)
            return {"SPILLCTL_MOUNTINFO": path}

        fill(self.p("f"), MiB, 5)
        r = ctl("stats", "--json", env=table("one", others + [mine]))
        self.assertOk(r)
        self.assertEqual(json.loads(r.out)["files"], 1)
        r = ctl("stats", env=table("none", others))
        self.assertFails(r, "spillctl: no spillway mount")
        r = ctl("stats", env=table("two", others + [mine, " ".join(fake) + "\n"]))
        self.assertFails(r, "several spillway mounts", real, "/nonexistent/spw-fake-mnt")
        # a file is judged by its filesystem: not in the table, not a spillway mount
        r = ctl("status", self.p("f"), env=table("none2", others))
        self.assertFails(r, "%s: not on a spillway mount" % self.p("f"))


class TestStatusPin(CtlCase):

    def test_status_of_files(self):
        self.populate()
        r = ctl("status", self.p("a"))
        self.assertOk(r)
        lines = r.out.splitlines()
        self.assertEqual(lines[0].split(), ["HOT", "DIRTY", "COLD", "RESTORING", "PINNED",
                                            "SEGMENTS", "SIZE", "PATH"])
        self.assertEqual(lines[1].split(), ["3", "3", "0", "0", "no", "0", "3.0", "MiB",
                                            self.p("a")], r)
        self.assertEqual(len(lines), 2)
        # -r: regular files only (not the symlink, the fifo, the directories), and a total
        r = ctl("status", "-r", self.mnt)
        self.assertOk(r)
        rows = [ln.split() for ln in r.out.splitlines()[1:]]
        self.assertEqual([x[-1] for x in rows[:-1]],
                         [self.p("a"), self.p("d", "b"), self.p("d", "e", "c")], r)
        self.assertEqual(rows[-1][:2], ["6", "6"], r)  # 3 + 2 + 1 chunks
        self.assertIn("total of 3 files", r.out)
        # JSON lines carry the daemon's counts as they are
        r = ctl("status", "-r", "--json", self.p("d"))
        self.assertOk(r)
        objs = [json.loads(x) for x in r.out.splitlines()]
        self.assertEqual([o["path"] for o in objs], [self.p("d", "b"), self.p("d", "e", "c")])
        for o in objs:
            want = state(o["path"])
            self.assertEqual({k: o[k] for k in want}, want)
            self.assertEqual(o["size"], os.stat(o["path"]).st_size)

    def test_status_refuses_directory_without_r(self):
        self.populate()
        r = ctl("status", self.p("d"), self.p("a"))
        self.assertFails(r, "%s: is a directory (use -r" % self.p("d"))
        self.assertIn(self.p("a"), r.out)  # the other path is still shown

    def test_pin_unpin(self):
        self.populate()
        r = ctl("pin", self.p("a"), self.p("d", "b"))
        self.assertOk(r, quiet=True)
        self.assertEqual(state(self.p("a"))["pinned"], 1)
        self.assertEqual(state(self.p("d", "b"))["pinned"], 1)
        self.assertEqual(os.getxattr(self.p("a"), "user.spillway.pin"), b"1")
        r = ctl("status", self.p("a"))
        self.assertEqual(r.out.splitlines()[1].split()[4], "yes", r)
        r = ctl("unpin", "-r", self.p("d"))
        self.assertOk(r, quiet=True)
        self.assertEqual(state(self.p("d", "b"))["pinned"], 0)
        self.assertEqual(state(self.p("a"))["pinned"], 1)
        r = ctl("unpin", "-v", self.p("a"))
        self.assertOk(r)
        self.assertEqual(r.out, "unpin: %s\n" % self.p("a"))
        self.assertEqual(state(self.p("a"))["pinned"], 0)


class TestEvictWarm(CtlCase):

    def test_evict_then_warm(self):
        self.populate()
        r = ctl("evict", self.p("a"))
        self.assertOk(r, quiet=True)
        st = state(self.p("a"))
        self.assertEqual((st["hot"], st["cold"]), (0, 3), st)
        self.assertGreaterEqual(st["segments"], 1, st)
        s = self.stats()
        self.assertGreaterEqual(s["spilled"]["bytes"], 3 * MiB, s)
        r = ctl("status", self.p("a"))
        self.assertEqual(r.out.splitlines()[1].split()[:3], ["0", "0", "3"], r)
        # -r takes every file below
        r = ctl("evict", "-r", self.p("d"))
        self.assertOk(r, quiet=True)
        self.assertEqual(state(self.p("d", "b"))["cold"], 2)
        self.assertEqual(state(self.p("d", "e", "c"))["cold"], 1)
        self.assertEqual(state(self.p("d", "e", "c"))["hot"], 0)
        # warm brings them back, intact
        r = ctl("warm", "-r", self.mnt)
        self.assertOk(r, quiet=True)
        for rel, n in (("a", 3), ("d/b", 2), ("d/e/c", 1)):
            st = state(self.p(rel))
            self.assertEqual((st["hot"], st["cold"], st["restoring"]), (n, 0, 0), (rel, st))
            self.assertEqual(sha_file(self.p(rel))[0], self.sums[rel], rel)
        self.assertGreaterEqual(self.stats()["restored"]["bytes"], 5 * MiB)

    def test_pinned_file_fails_others_done(self):
        self.populate()
        os.setxattr(self.p("a"), "user.spillway.pin", b"1")
        r = ctl("evict", self.p("a"), self.p("d", "b"), "/nonexistent-spw-path")
        self.assertFails(r, "spillctl: evict: %s: Device or resource busy (pinned)" % self.p("a"),
                         "spillctl: /nonexistent-spw-path: No such file or directory",
                         "1 of 2 files failed")
        self.assertEqual(r.out, "")
        self.assertEqual(state(self.p("a"))["cold"], 0)
        self.assertEqual(state(self.p("d", "b"))["cold"], 2)

    def test_progress_bar_on_a_terminal(self):
        os.mkdir(self.p("big"))
        for i in range(4):
            fill(self.p("big", "f%d" % i), 4 * MiB, 10 + i)
        rc, text = ctl_tty("evict", "-r", self.p("big"))
        self.assertEqual(rc, 0, text)
        self.assertIn("\r", text)  # redrawn in place
        self.assertRegex(text, r"evict \[#{10,30}\] 100% 16\.0 MiB/16\.0 MiB "
                               r"[0-9.]+ [KMG]?i?B/s 4/4 files")
        self.assertTrue(text.rstrip("\r\n").endswith("files"), repr(text[-200:]))
        for i in range(4):
            self.assertEqual(state(self.p("big", "f%d" % i))["cold"], 4)
        rc, text = ctl_tty("warm", self.p("big", "f0"))
        self.assertEqual(rc, 0, text)
        self.assertRegex(text, r"warm \[#{10,30}\] 100% 4\.0 MiB/4\.0 MiB "
                               r"[0-9.]+ [KMG]?i?B/s 1/1 files")
        # without a terminal: nothing at all
        r = ctl("warm", "-r", self.p("big"))
        self.assertOk(r, quiet=True)
        self.assertEqual(state(self.p("big", "f3"))["hot"], 4)

    def test_progress_reports_failures_on_a_terminal(self):
        fill(self.p("f"), MiB, 20)
        os.setxattr(self.p("f"), "user.spillway.pin", b"1")
        rc, text = ctl_tty("evict", self.p("f"))
        self.assertEqual(rc, 1, text)
        self.assertIn("evict: %s: Device or resource busy (pinned)" % self.p("f"), text)


class TestErrors(CtlCase):

    def test_paths_not_on_a_spillway_mount(self):
        d = self.tmpdir()
        x = os.path.join(d, "x")
        with open(x, "w") as f:
            f.write("x")
        for verb in ("status", "pin", "evict", "warm"):
            r = ctl(verb, x)
            self.assertFails(r, "spillctl: %s: not on a spillway mount" % x)
        r = ctl("stats", d)
        self.assertFails(r, "spillctl: %s: not on a spillway mount" % d)
        missing = self.p("no-such-file")
        r = ctl("status", missing)
        self.assertFails(r, "spillctl: %s: No such file or directory" % missing)
        r = ctl("evict", missing)
        self.assertFails(r, "spillctl: %s: No such file or directory" % missing)
        os.mkfifo(self.p("fifo"))
        r = ctl("pin", self.p("fifo"))
        self.assertFails(r, "%s: not a regular file" % self.p("fifo"))

    def test_usage_and_fsck(self):
        # spillctl fsck runs spillway-fsck with its arguments and exit status:
        # no state dir is a usage error (16), a mountpoint is refused (8)
        r = ctl("fsck")
        self.assertEqual(r.rc, 16, r)
        r = ctl("fsck", self.mnt)
        self.assertEqual(r.rc, 8, r)
        self.assertIn("unmount it first", r.err)
        for args in ((), ("status",), ("frobnicate",), ("stats", "--watch")):
            r = ctl(*args)
            self.assertEqual(r.rc, 2, (args, r))
        r = ctl("--help")
        self.assertOk(r)
        for verb in ("stats", "status", "pin", "unpin", "evict", "warm", "fsck"):
            self.assertIn(verb, r.out)

    def test_stopped_daemon_is_not_answering(self):
        fill(self.p("f"), 2 * MiB, 30)
        os.kill(self.m.pid, signal.SIGSTOP)
        # registered after the mount: runs before it is unmounted
        self.addCleanup(os.kill, self.m.pid, signal.SIGCONT)
        for args in (("stats", self.mnt), ("status", self.p("f")), ("evict", self.p("f")),
                     ("stats", "--json", self.mnt)):
            r = ctl("--timeout", "1", *args)
            self.assertFails(r, "spillctl: %s: the spillway daemon is not answering" % self.mnt)
            self.assertLess(r.secs, 10, r)
        # the value from the environment, and --timeout after the command
        r = ctl("status", self.p("f"), env={"SPILLCTL_TIMEOUT": "0.5"})
        self.assertFails(r, "no reply within 0.5s")
        r = ctl("status", "--timeout", "0.7", self.p("f"))
        self.assertFails(r, "no reply within 0.7s")
        os.kill(self.m.pid, signal.SIGCONT)
        r = ctl("status", self.p("f"))
        self.assertOk(r)

    def test_dead_daemon_is_gone(self):
        m = harness.Mount(hot_size="16M", tag="killed")
        m.start()
        self.addCleanup(self._stop_killed, m)
        fill(m.path("f"), MiB, 40)
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
        r = ctl("status", m.path("f"))
        self.assertFails(r, "the spillway daemon is gone", "fusermount3 -u %s" % m.mnt)

    def _stop_killed(self, m):
        problems = [x for x in m.stop() if not x.startswith("daemon died")]
        if problems:
            raise harness.MountError("; ".join(problems))

    def test_evict_without_cold_tier(self):
        m = self.mount(hot_size="16M", tag="nocold")
        fill(m.path("f"), MiB, 50)
        r = ctl("evict", m.path("f"))
        self.assertFails(r, "evict: %s: Operation not supported (the mount has no cold tier"
                         % m.path("f"))
        self.assertEqual(state(m.path("f"))["hot"], 1)


if __name__ == "__main__":
    harness.main()
