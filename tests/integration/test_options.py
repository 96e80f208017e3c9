#!/usr/bin/env python3
"""
test_options - mount option validation and the ways spillway gets mounted.

Every bad value must print one line naming the option and the value, exit 1
and leave nothing mounted; good invocations (defaults, daemonized, mount(8),
--help) must work and unmount cleanly.
Run: python3 test_options.py --build BUILD_DIR [-k pattern]
"""

import os
import re
import shutil
import stat
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402

MiB = 1 << 20


def mentions(text, value):
    """value appears in text as a whole token (not inside a longer word)."""
    return re.search(r"(?<![0-9A-Za-z])%s(?![0-9A-Za-z])" % re.escape(value), text) is not None


class TestBadOptions(SpwTestCase):
    timeout = 60

    def bad(self, opt, name, value, foreground=True, mnt=None, hot=True):
        """Run spillway with -o opt; expect exit 1, one stderr line naming
        `name` and `value`, nothing mounted."""
        if mnt is None:
            mnt = self.tmpdir()
        opts = []
        if hot:
            opts.append("hot_dir=" + os.path.join(self.tmpdir(on_shm=True), "hot"))
        if opt:
            opts.append(opt)
        args = (["-f"] if foreground else []) + (["-o", ",".join(opts)] if opts else []) + [mnt]
        rc, out, err, was_mounted = harness.run_spillway(args, mnt)
        ctx = "spillway %s\nrc=%r\nstdout=%r\nstderr=%r" % (" ".join(args), rc, out, err)
        self.assertFalse(was_mounted, "a bad option still mounted\n" + ctx)
        self.assertIsNotNone(rc, "spillway did not exit (it is serving a mount?)\n" + ctx)
        self.assertEqual(rc, 1, ctx)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, "expected exactly one line on stderr\n" + ctx)
        self.assertTrue(lines[0].startswith("spillway"), ctx)
        self.assertIn(name, err, ctx)
        if value is not None:
            self.assertTrue(mentions(err, value),
                            "stderr does not name value %r\n%s" % (value, ctx))
        self.assertFalse(harness.is_mounted(mnt))
        if os.path.isdir(mnt):
            self.assertFalse(os.path.ismount(mnt))
        return err

    def test_hot_size_negative(self):
        self.bad("hot_size=-5G", "hot_size", "-5G")

    def test_hot_size_bad_suffix(self):
        self.bad("hot_size=12Q", "hot_size", "12Q")

    def test_hot_size_zero(self):
        self.bad("hot_size=0", "hot_size", "0")

    def test_hot_size_empty(self):
        self.bad("hot_size=", "hot_size", None)

    def test_chunk_size_not_power_of_two(self):
        self.bad("chunk_size=3M", "chunk_size", "3M")

    def test_chunk_size_too_small(self):
        self.bad("chunk_size=512K", "chunk_size", "512K")

    def test_chunk_size_too_big(self):
        self.bad("chunk_size=128M", "chunk_size", "128M")

    def test_unknown_option(self):
        self.bad("bogus=1", "bogus=1", None)

    def test_hot_min_above_hot_size(self):
        self.bad("hot_size=64M,hot_min=100M", "hot_min", "100M")

    def test_hot_min_bad_size(self):
        self.bad("hot_min=12Q", "hot_min", "12Q")

    def test_mem_reserve_above_ram(self):
        self.bad("mem_reserve=100000T", "mem_reserve", "100000T")

    def test_io_uring_bad_word(self):
        self.bad("io_uring=fast", "io_uring", "fast")

    def test_mem_pressure_bad_word(self):
        self.bad("mem_pressure=maybe", "mem_pressure", "maybe")

    def test_log_level(self):
        self.bad("log_level=loud", "log_level", "loud")

    def test_allow_other_needs_default_permissions(self):
        err = self.bad("allow_other", "allow_other", None)
        self.assertIn("default_permissions", err)

    def test_hot_dir_cannot_create(self):
        self.bad("hot_dir=/proc/nope", "hot_dir", "/proc/nope", hot=False)
        self.assertFalse(os.path.exists("/proc/nope"))

    def test_hot_dir_root_refused(self):
        """hot_dir=/ was accepted: the mount chmodded / to 0700 and put its
        lock file there."""
        before = os.stat("/")
        self.bad("hot_dir=/", "hot_dir", None, hot=False)
        self.assertEqual(os.stat("/").st_mode, before.st_mode)
        self.assertFalse(os.path.exists("/.spillway-hot"))
        self.assertFalse(os.path.exists("/.lock"))

    def test_hot_dir_user_lock_refused_untouched(self):
        """A hot_dir holding only a user's file named .lock was adopted, made
        0700, and the user's .lock unlinked at unmount (issue 39)."""
        for extra in ("", ",state_dir=" + os.path.join(self.tmpdir(), "state")):
            hot = os.path.join(self.tmpdir(on_shm=True), "mine")
            os.mkdir(hot)
            os.chmod(hot, 0o755)
            with open(os.path.join(hot, ".lock"), "wb") as f:
                f.write(b"my own lock\n")
            err = self.bad("hot_dir=" + hot + extra, "hot_dir", hot, hot=False)
            self.assertIn("not a spillway hot_dir", err)
            self.assertEqual(os.listdir(hot), [".lock"])
            with open(os.path.join(hot, ".lock"), "rb") as f:
                self.assertEqual(f.read(), b"my own lock\n")
            self.assertEqual(os.stat(hot).st_mode & 0o777, 0o755)

    def test_hot_dir_user_marker_refused_untouched(self):
        """A user's file named .spillway-hot made any directory spillway's:
        a user file named like a hot file in it was deleted at mount, with
        no log line (issue 39)."""
        for extra in ("", ",state_dir=" + os.path.join(self.tmpdir(), "state")):
            hot = os.path.join(self.tmpdir(on_shm=True), "mine")
            os.mkdir(hot)
            os.chmod(hot, 0o755)
            names = {".spillway-hot": b"my notes about spillway\n",
                     "0000000000000002": b"precious"}
            for n, data in names.items():
                with open(os.path.join(hot, n), "wb") as f:
                    f.write(data)
            err = self.bad("hot_dir=" + hot + extra, "hot_dir", hot, hot=False)
            self.assertIn("not a spillway marker", err)
            self.assertEqual(sorted(os.listdir(hot)), sorted(names))
            for n, data in names.items():
                with open(os.path.join(hot, n), "rb") as f:
                    self.assertEqual(f.read(), data)
            self.assertEqual(os.stat(hot).st_mode & 0o777, 0o755)

    def test_hot_dir_not_spillways_untouched(self):
        """A given hot_dir holding files that look like hot files lost them
        silently (with or without a journal): now refused, nothing changed."""
        for extra in ("", ",state_dir=" + os.path.join(self.tmpdir(), "state")):
            hot = os.path.join(self.tmpdir(on_shm=True), "mine")
            os.mkdir(hot)
            os.chmod(hot, 0o755)
            names = {"0000000000000002": b"precious", "00000000000000ff": b"also mine",
                     "notes": b"x"}
            for n, data in names.items():
                with open(os.path.join(hot, n), "wb") as f:
                    f.write(data)
            err = self.bad("hot_dir=" + hot + extra, "hot_dir", hot, hot=False)
            self.assertIn("empty", err)
            self.assertEqual(sorted(os.listdir(hot)), sorted(names))
            for n, data in names.items():
                with open(os.path.join(hot, n), "rb") as f:
                    self.assertEqual(f.read(), data)
            self.assertEqual(os.stat(hot).st_mode & 0o777, 0o755)

    def test_metrics_unwritable(self):
        """metrics=/proc/nope mounted and only warned at each write."""
        err = self.bad("metrics=/proc/nope", "metrics", "/proc/nope")
        self.assertIn("cannot create", err)

    def test_nvme_named_twice(self):
        """nvme=D:D said 'in use by another spillway mount' and left its locks."""
        d = self.tmpdir()
        err = self.bad("nvme=%s:%s" % (d, d), "nvme", None)
        self.assertIn("named twice", err)
        sub = os.path.join(d, "sub")
        os.mkdir(sub)
        err = self.bad("nvme=%s:%s" % (d, sub), "nvme", None)
        self.assertIn("named twice", err)
        self.assertEqual(os.listdir(d), ["sub"])  # no lock file left behind

    def test_spillway_mount_not_a_cold_dir_nor_a_second_mountpoint(self):
        """nvme= on another spillway mount (cold data on a RAM tier) was
        accepted, and a second daemon on a served mountpoint hid the first."""
        with harness.Mount(tag="first") as m:
            err = self.bad("nvme=" + m.mnt, "nvme", m.mnt)
            self.assertIn("spillway mount", err)
            sub = m.path("cold")
            os.mkdir(sub)
            self.bad("nvme=" + sub, "nvme", sub)
            os.rmdir(sub)
            hot = os.path.join(self.tmpdir(on_shm=True), "hot")
            # not run_spillway: it unmounts what it finds at mnt afterwards
            p = subprocess.run([harness.SPILLWAY, "-f", "-o", "hot_dir=" + hot, m.mnt],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=10)
            rc, err = p.returncode, p.stderr
            self.assertEqual(rc, 1, err)
            self.assertEqual(len([ln for ln in err.splitlines() if ln.strip()]), 1, err)
            self.assertIn("spillway mount already", err)
            self.assertEqual(open("/proc/self/mounts").read().count(" %s " % m.mnt), 1)
            with open(m.path("still"), "w") as f:  # the first still serves
                f.write("ok")

    def test_nvme_inside_another_mounts_cold_dir(self):
        """nvme= inside the cold directory of a live mount was accepted: two
        mounts' segments in one tree, one's clean-up the other's loss."""
        cold = self.tmpdir()
        with harness.Mount(opts=["nvme=" + cold], tag="owner") as m:
            sub = os.path.join(cold, "a", "b")
            os.makedirs(sub)
            err = self.bad("nvme=" + sub, "nvme", sub)
            self.assertIn("cold directory of another spillway mount", err)
            with open(m.path("still"), "w") as f:  # the first still serves
                f.write("ok")
        # once that mount is gone, the directory is free to use
        with harness.Mount(opts=["nvme=" + sub], tag="after") as m2:
            with open(m2.path("x"), "w") as f:
                f.write("ok")

    def test_failed_mount_leaves_no_hot_dir(self):
        """A mount refused after its options (state_dir in use) left the
        hot_dir it had just created."""
        cold, state = self.tmpdir(), self.tmpdir()
        with harness.Mount(opts=["nvme=" + cold, "state_dir=" + state], tag="holder"):
            hot = os.path.join(self.tmpdir(on_shm=True), "hot")
            err = self.bad("hot_dir=%s,nvme=%s,state_dir=%s" % (hot, cold, state),
                           "state_dir", state, hot=False)
            self.assertIn("in use", err)
            self.assertFalse(os.path.exists(hot), "hot_dir left behind by a failed mount")

    def test_missing_mountpoint(self):
        mnt = os.path.join(self.tmpdir(), "no", "such")
        self.bad(None, mnt, None, mnt=mnt)
        self.assertFalse(os.path.exists(mnt))

    def test_mountpoint_not_empty(self):
        mnt = self.tmpdir()
        with open(os.path.join(mnt, "precious"), "w") as f:
            f.write("keep me")
        err = self.bad(None, mnt, None, mnt=mnt)
        self.assertIn("empty", err)
        with open(os.path.join(mnt, "precious")) as f:
            self.assertEqual(f.read(), "keep me")

    def test_mountpoint_is_a_file(self):
        path = os.path.join(self.tmpdir(), "file")
        with open(path, "w") as f:
            f.write("x")
        self.bad(None, path, None, mnt=path)

    def test_bad_value_without_foreground(self):
        """The daemonizing path validates before it forks: same message, exit 1."""
        self.bad("hot_size=-5G", "hot_size", "-5G", foreground=False)

    def test_bad_chunk_without_foreground(self):
        self.bad("chunk_size=3M", "chunk_size", "3M", foreground=False)

    def test_bad_option_creates_no_hot_dir(self):
        shm = self.tmpdir(on_shm=True)
        hot = os.path.join(shm, "hot")
        mnt = self.tmpdir()
        rc, out, err, mounted = harness.run_spillway(
            ["-f", "-o", "hot_dir=%s,chunk_size=3M" % hot, mnt], mnt)
        self.assertEqual(rc, 1, err)
        self.assertFalse(mounted)
        self.assertFalse(os.path.exists(hot), "hot_dir created although options were invalid")

    def test_no_mountpoint(self):
        rc, out, err, mounted = harness.run_spillway(["-f"], "/nonexistent-spw-mnt")
        self.assertNotIn(rc, (0, None), "spillway without a mountpoint: rc=%r" % rc)
        self.assertTrue(err.strip(), "no error message without a mountpoint")


class TestHelp(SpwTestCase):
    def test_help(self):
        r = subprocess.run([harness.SPILLWAY, "--help"], capture_output=True, timeout=10)
        text = (r.stdout + r.stderr).decode(errors="replace")
        self.assertEqual(r.returncode, 0, text)
        for opt in ("hot_size", "hot_dir", "chunk_size", "log_level"):
            self.assertIn(opt, text)

    def test_version(self):
        r = subprocess.run([harness.SPILLWAY, "--version"], capture_output=True, timeout=10)
        text = (r.stdout + r.stderr).decode(errors="replace")
        self.assertEqual(r.returncode, 0, text)
        self.assertIn("spillway", text.lower())


class _Ran:
    def __init__(self, returncode, output):
        self.returncode = returncode
        self.output = output


def run_to_file(argv, tmp, env=None):
    """Run a command whose children may daemonize: output goes to a file, not
    a pipe a daemon could hold open forever."""
    path = os.path.join(tmp, "out")
    with open(path, "wb") as f:
        rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env,
                            timeout=30).returncode
    with open(path, errors="replace") as f:
        return _Ran(rc, "$ %s\n%s" % (" ".join(argv), f.read()))


def _hot_dir_from_fds(pid):
    """The default hot dir, seen through the daemon's open files."""
    found = set()
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"(/dev/shm/spillway-%d-[^/]+)" % os.getuid(), target)
        if m:
            found.add(m.group(1))
    return found


class TestGoodMounts(SpwTestCase):
    timeout = 90

    def test_defaults(self):
        """No options at all: hot dir on /dev/shm, created 0700; clean unmount."""
        prefix = "spillway-%d-" % os.getuid()
        before = {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}
        owned = []

        def remove_owned():
            for d in owned:
                shutil.rmtree(d, ignore_errors=True)

        self.addCleanup(remove_owned)
        m = harness.Mount(hot_dir=False, hot_size=None, tag="defaults")
        with m:
            fd = os.open(m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
            try:
                os.write(fd, b"x" * MiB)
                os.fsync(fd)
                cands = _hot_dir_from_fds(m.pid)
                new = {os.path.join("/dev/shm", n) for n in os.listdir("/dev/shm")
                       if n.startswith(prefix) and n not in before}
                if not cands:
                    cands = new
                owned.extend(d for d in cands if os.path.basename(d) not in before)
                self.assertEqual(len(cands), 1, "default hot dir not found (candidates %s)"
                                 % sorted(cands))
                hot = cands.pop()
                st = os.stat(hot)
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
                self.assertEqual(st.st_uid, os.getuid())
                self.assertTrue(os.listdir(hot), "hot dir is empty while a file holds 1 MiB")
                self.assertEqual(os.pread(fd, 4, 0), b"xxxx")
            finally:
                os.close(fd)
            proc = m.proc
        self.assertEqual(proc.returncode, 0)
        self.assertFalse(harness.is_mounted(m.mnt))

    def test_daemonized(self):
        """Without -f the parent returns once the mount is live, then exits 0."""
        mnt = self.tmpdir()
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        sp = harness.Spawned(mnt)
        self.addCleanup(sp.stop)
        r = run_to_file([harness.SPILLWAY, "-o", "hot_dir=%s,hot_size=64M" % hot, mnt],
                        self.tmpdir())
        self.assertEqual(r.returncode, 0, r.output)
        # no polling: the mount must already be there when the parent exits
        self.assertTrue(harness.is_mounted(mnt), "parent exited before the mount was live")
        pids = harness.find_daemon_pids(mnt)
        sp.pids.extend(pids)
        self.assertEqual(len(pids), 1, "expected one daemon process, found %s" % pids)
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(b"daemon")
        with open(os.path.join(mnt, "f"), "rb") as f:
            self.assertEqual(f.read(), b"daemon")
        rc, out = harness._run_quiet(["fusermount3", "-u", mnt])
        self.assertEqual(rc, 0, out)
        harness.wait_until(lambda: not harness._pid_alive(pids[0]), harness.EXIT_DEADLINE,
                           "the daemon to exit after unmount")
        self.assertFalse(harness.is_mounted(mnt))

    def _helper_mount(self, argv_fn, env=None, fstype="fuse.spillway"):
        """Mount through a mount helper (the daemon forks into the background),
        use it, unmount with umount(8), and check the daemon exits."""
        mnt = self.tmpdir()
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        sp = harness.Spawned(mnt)
        self.addCleanup(sp.stop)
        r = run_to_file(argv_fn(mnt, "hot_size=64M,hot_dir=%s" % hot), self.tmpdir(), env=env)
        sp.pids.extend(harness.find_daemon_pids(mnt))
        self.assertEqual(r.returncode, 0, r.output)
        entry = harness.mount_entry(mnt)
        self.assertIsNotNone(entry, "the helper returned 0 but nothing is mounted")
        if fstype:
            self.assertEqual(entry[2], fstype, entry)
        else:
            self.assertTrue(entry[2].startswith("fuse"), entry)
        self.assertEqual(entry[0], "spillway", entry)
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(b"via a mount helper")
        with open(os.path.join(mnt, "f"), "rb") as f:
            self.assertEqual(f.read(), b"via a mount helper")
        self.assertEqual(stat.S_IMODE(os.stat(hot).st_mode), 0o700)
        self.assertTrue(os.listdir(hot))
        pids = harness.find_daemon_pids(mnt)
        self.assertEqual(len(pids), 1, pids)
        r = subprocess.run(["umount", mnt], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        harness.wait_until(lambda: not harness._pid_alive(pids[0]), harness.EXIT_DEADLINE,
                           "the daemon to exit after umount")
        self.assertFalse(harness.is_mounted(mnt))

    def test_mount_fuse3_helper(self):
        """What mount(8) runs for -t fuse.spillway: mount.fuse3 SOURCE MNT -t
        fuse.spillway -o OPTS, which execs `spillway SOURCE MNT -o rw,OPTS,dev,suid`
        found on PATH (here the build dir)."""
        helper = shutil.which("mount.fuse3", path="/sbin:/usr/sbin:/bin:/usr/bin")
        self.assertIsNotNone(helper, "mount.fuse3 is not installed")
        env = dict(os.environ)
        env["PATH"] = harness.BUILD_DIR + ":" + env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        self._helper_mount(lambda mnt, o: [helper, "spillway", mnt, "-t", "fuse.spillway",
                                           "-o", o], env=env)

    def test_mount8_program_path_form(self):
        """mount(8) with the fstab form `/path/to/spillway#spillway MNT fuse OPTS`
        (works without installing: mount(8) clears PATH for its helpers)."""
        prog = harness.SPILLWAY + "#spillway"
        self._helper_mount(lambda mnt, o: ["mount", "-t", "fuse", prog, mnt, "-o", o],
                           fstype=None)

    def test_mount8_fuse_spillway(self):
        """mount -t fuse.spillway spillway MNT -o ... once spillway is installed."""
        std_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if not (shutil.which("spillway", path=std_path)
                or os.path.exists("/sbin/mount.fuse.spillway")
                or os.path.exists("/usr/sbin/mount.fuse.spillway")):
            self.skipTest("spillway is not installed in %s and there is no "
                          "/sbin/mount.fuse.spillway; mount(8) runs helpers with PATH "
                          "cleared, so a build dir on PATH cannot be found" % std_path)
        self._helper_mount(lambda mnt, o: ["mount", "-t", "fuse.spillway", "spillway", mnt,
                                           "-o", o])

    def test_valid_sizes_and_levels(self):
        cases = [
            dict(hot_size="262144K", opts=["chunk_size=1M", "log_level=debug"]),
            dict(hot_size="1G", opts=["chunk_size=64M", "log_level=error"]),
            dict(hot_size="128M", opts=["chunk_size=2M", "log_level=warn"]),
            dict(hot_size="2G", opts=["chunk_size=4M", "log_level=info"]),
        ]
        data = os.urandom(5 * MiB + 77)
        for kw in cases:
            with self.subTest(**kw):
                with harness.Mount(tag="sizes", **kw) as m:
                    with open(m.path("f"), "wb") as f:
                        f.write(data)
                    with open(m.path("f"), "rb") as f:
                        self.assertEqual(f.read(), data)

    def test_chunk_size_suffixes(self):
        for cs in ("1048576", "1024K", "16M"):
            with self.subTest(chunk_size=cs):
                with harness.Mount(tag="chunk", opts=["chunk_size=" + cs]) as m:
                    with open(m.path("f"), "wb") as f:
                        f.write(b"z" * (3 * MiB))
                    self.assertEqual(os.stat(m.path("f")).st_size, 3 * MiB)


def _as_nobody(code):
    """Run python code as uid/gid 65534; return its stdout lines."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    r = subprocess.run([py, "-c", code], user=65534, group=65534, extra_groups=[],
                       capture_output=True, timeout=30, cwd="/")
    if r.returncode != 0:
        raise AssertionError("child failed: %s" % r.stderr.decode(errors="replace"))
    return r.stdout.decode().split()


PROBE = r"""
import os, sys
def probe(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return __import__("errno").errorcode[e.errno]
"""


def _probe_code(actions):
    body = "\n".join("print(probe(lambda: %s))" % a for a in actions)
    return PROBE + body + "\n"


URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def libfuse_version():
    """(major, minor) of the libfuse the built spillway runs with."""
    out = subprocess.run([harness.SPILLWAY, "--version"], stdout=subprocess.PIPE,
                         timeout=10).stdout.decode()
    m = re.search(r"libfuse (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class TestIoUring(SpwTestCase):
    """io_uring=on (issue 35 item 4): the rings run where libfuse (3.18+) and
    the kernel (enable_uring=Y) have them; elsewhere the mount says in one
    log line why not and serves every request through /dev/fuse."""

    timeout = 90

    def uring_mount(self, tag):
        m = self.mount(hot_size="64M", opts=["io_uring=on"], tag=tag)
        line = harness.wait_until(
            lambda: next((ln for ln in m.log_text(200).splitlines() if "io_uring o" in ln),
                         None), 10, "the io_uring log line")
        data = os.urandom(3 * MiB + 5)
        with open(m.path("f"), "wb") as f:
            f.write(data)
        with open(m.path("f"), "rb") as f:
            self.assertEqual(f.read(), data, "bytes through io_uring=on (%s)" % line)
        rings = 0
        for t in os.listdir("/proc/%d/task" % m.pid):
            with open("/proc/%d/task/%s/comm" % (m.pid, t)) as f:
                rings += f.read().startswith("fuse-ring-")
        return line, rings

    def set_param(self, value):
        with open(URING_PARAM) as f:
            old = f.read().strip()
        if old != value:
            with open(URING_PARAM, "w") as f:
                f.write(value + "\n")

            def put_back():
                with open(URING_PARAM, "w") as f:
                    f.write(old + "\n")
            self.addCleanup(put_back)  # runs after the mounts registered later stop

    def test_io_uring(self):
        if libfuse_version() < (3, 18):
            line, rings = self.uring_mount("old-libfuse")
            self.assertIn("io_uring off (built with libfuse older than 3.18)", line)
            self.assertEqual(rings, 0)
            return
        self.assertTrue(os.path.exists(URING_PARAM), "a 6.14+ kernel has " + URING_PARAM)
        self.set_param("N")
        line, rings = self.uring_mount("param-off")
        self.assertIn("io_uring off (the kernel's FUSE io_uring is disabled: "
                      "/sys/module/fuse/parameters/enable_uring is N)", line)
        self.assertEqual(rings, 0)
        self.set_param("Y")
        line, rings = self.uring_mount("rings")
        self.assertIn("io_uring on: FUSE requests over one ring per CPU", line)
        self.assertEqual(rings, os.cpu_count(), "one fuse-ring thread per CPU")


class TestPermissions(SpwTestCase):
    def test_other_users_locked_out_by_default(self):
        with harness.Mount(tag="private") as m:
            os.chmod(m.base, 0o755)  # only FUSE itself may stop the other user
            with open(m.path("f"), "wb") as f:
                f.write(b"x")
            os.chmod(m.path("f"), 0o644)
            res = _as_nobody(_probe_code([
                "os.stat(%r)" % m.path("f"),
                "open(%r).read()" % m.path("f"),
            ]))
            self.assertEqual(res, ["EACCES", "EACCES"])

    def test_allow_other_with_default_permissions(self):
        with harness.Mount(tag="shared", opts=["allow_other", "default_permissions"]) as m:
            os.chmod(m.base, 0o755)
            os.chmod(m.shm, 0o755)  # only hot_dir's own 0700 protects the hot data
            os.chmod(m.mnt, 0o755)
            with open(m.path("pub"), "wb") as f:
                f.write(b"public")
            with open(m.path("priv"), "wb") as f:
                f.write(b"private")
            os.chmod(m.path("pub"), 0o644)
            os.chmod(m.path("priv"), 0o600)
            res = _as_nobody(_probe_code([
                "open(%r, 'rb').read()" % m.path("pub"),
                "open(%r, 'ab')" % m.path("pub"),
                "open(%r, 'rb').read()" % m.path("priv"),
                "os.listdir(%r)" % m.hot_dir,
                "open(%r, 'wb')" % m.path("newfile"),
            ]))
            self.assertEqual(res, ["ok", "EACCES", "EACCES", "EACCES", "EACCES"])


if __name__ == "__main__":
    harness.main()
