"""
harness - shared machinery for spillway's integration tests (stdlib only).

Each test file ends with `harness.main()`; ctest runs it as
`python3 FILE --build BUILD_DIR`. Exit 77 (skip) only when /dev/fuse is absent.
Guarantees: every daemon and mount started here is unmounted and killed by pid
on every exit path - normal end, failure, exception, SIGTERM/SIGINT/SIGHUP, a
per-test timeout (watchdog), and the death of this process (PR_SET_PDEATHSIG).
Daemon logs are kept in BUILD_DIR/integration-logs/<test id>.log.
Sanitizer builds (cmake -DSPW_SANITIZE=...): every program started here
writes its ASan/UBSan/LSan/TSan reports to integration-logs/sanitizer-<pid>/;
a report fails the test that was running (and the mount that made it), and
timeouts are scaled by TIME_SCALE.
Threading: tests run in the main thread; the watchdog is the only other thread
that touches mounts, and only after a test has overrun its timeout.
"""

import argparse
import atexit
import ctypes
import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD_DIR = None
SPILLWAY = None
LOG_DIR = None
SAN_DIR = None  # sanitizer reports of this run (log_path), see _sanitizer_env
SANITIZE = ""  # the build's SPW_SANITIZE ("" for a plain build)
TIME_SCALE = 1  # timeouts are multiplied by this (sanitizers are slower)

MOUNT_DEADLINE = 10.0  # seconds for a mount to appear
# seconds for the daemon to exit after unmount: with a cold tier it spills
# everything still dirty in RAM first (docs/ram.md)
EXIT_DEADLINE = 60.0
KILL_DEADLINE = 5.0  # seconds between SIGTERM and SIGKILL

# Every wait in the daemon has a bound (docs/costs-and-waits.md): a
# writer waits at most write_wait for room; a request to S3 at most
# S3_REQUEST_BOUND (8 attempts, each ended by 30 s below 1 KiB/s, with backoff
# capped at 20 s). A mount fails its test when any request took longer than
# twice the longest bound it was configured with (the daemon measures each
# request: user.spillway.stats "slow_request").
DEFAULT_WRITE_WAIT = 60.0
S3_REQUEST_BOUND = 8 * (30.0 + 20.0)


def parse_duration(v):
    """A mount-option duration (500ms, 60s, 2m, 1h; bare = seconds) in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", v.strip())
    if not m:
        raise ValueError("bad duration %r" % v)
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def request_bound(opts):
    """The longest wait a mount with these -o options may make a request take."""
    bound = DEFAULT_WRITE_WAIT
    s3 = False
    for o in opts:
        k, _, v = o.partition("=")
        if k == "write_wait":
            bound = parse_duration(v)
        elif k == "s3":
            s3 = True
    return max(bound, S3_REQUEST_BOUND if s3 else 0.0)


# daemon-private files allowed in hot_dir besides the inode-numbered hot files
DAEMON_FILES = {".lock", ".spillway-hot"}  # the lock; the marker (tier/hot/hot.h HOT_MARKER)

_live = []  # Mount / Spawned objects not yet cleaned up
_tmp_dirs = set()  # test temp dirs not yet removed (see make_tmpdir)
_live_lock = threading.RLock()
_current_test = ["startup"]

libc = ctypes.CDLL(None, use_errno=True)

# --------------------------------------------------------------------------
# small helpers


def _pdeathsig():
    """preexec_fn: the daemon gets SIGTERM if the test process dies."""
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _unescape_mount_field(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mount_entry(path):
    """The /proc/mounts line fields for path (last one wins), or None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and _unescape_mount_field(fields[1]) == path:
                found = fields
    return found


def is_mounted(path):
    return mount_entry(path) is not None


def wait_until(pred, timeout, what, interval=0.01):
    """Poll pred() until true or the deadline passes; returns pred()'s value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def _run_quiet(argv, timeout=15):
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def mount_holders(path):
    """Processes holding something under the mount at path (an open fd, cwd,
    root or mapping), as "pid comm: what" strings: who made an unmount busy."""
    path = os.path.realpath(path)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        base = "/proc/" + pid
        links = ["cwd", "root"]
        try:
            links += ["fd/" + n for n in os.listdir(base + "/fd")]
        except OSError:
            continue
        what = []
        for ln in links:
            try:
                t = os.readlink(base + "/" + ln)
            except OSError:
                continue
            if t == path or t.startswith(path + "/"):
                what.append("%s -> %s" % (ln, t))
        try:
            with open(base + "/maps") as f:
                what += ["maps " + ln.split()[-1] for ln in f
                         if (path + "/") in ln or ln.rstrip().endswith(" " + path)]
        except OSError:
            pass
        if what:
            try:
                with open(base + "/comm") as f:
                    comm = f.read().strip()
            except OSError:
                comm = "?"
            found.append("%s %s: %s" % (pid, comm, ", ".join(what)))
    return found


def clean_unmount(path, busy_deadline=10.0):
    """fusermount3 -u path, as an administrator would: when the kernel says the
    mount is busy (some process, maybe not ours, is inside it for a moment),
    try again until busy_deadline. Returns (rc, output, holders seen)."""
    deadline = time.monotonic() + busy_deadline
    holders = []
    while True:
        rc, out = _run_quiet(["fusermount3", "-u", path], timeout=30)
        if rc == 0 or "busy" not in out or time.monotonic() >= deadline:
            return rc, out, holders
        holders = mount_holders(path) or holders
        sys.stderr.write("[harness] %s busy at unmount (%s); trying again\n"
                         % (path, "; ".join(holders) or "no process holds it: a lookup in flight"))
        time.sleep(0.1)


def force_unmount(path):
    """fusermount3 -u, falling back to umount -l. Returns how it went."""
    if not is_mounted(path):
        return "not mounted"
    rc, out = _run_quiet(["fusermount3", "-u", path])
    if rc == 0 and not is_mounted(path):
        return "fusermount3"
    rc2, out2 = _run_quiet(["umount", "-l", path])
    if rc2 == 0 and not is_mounted(path):
        return "umount -l (fusermount3 said: %s)" % out.strip()
    return "FAILED: fusermount3: %s; umount -l: %s" % (out.strip(), out2.strip())


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0)
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid(pid, popen=None):
    """SIGTERM, then SIGKILL after KILL_DEADLINE. Returns the signal that ended it."""
    for sig, deadline in ((signal.SIGTERM, KILL_DEADLINE), (signal.SIGKILL, KILL_DEADLINE)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return None
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if popen is not None:
                if popen.poll() is not None:
                    return sig
            elif not _pid_alive(pid):
                return sig
            time.sleep(0.01)
    return signal.SIGKILL


def find_daemon_pids(mnt):
    """Pids of spillway processes whose command line names mnt (daemonized ones)."""
    mnt = os.path.realpath(mnt)
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if not args or "spillway" not in os.path.basename(args[0]):
            continue
        if any(os.path.realpath(a) == mnt for a in args[1:] if a.startswith("/")):
            pids.append(int(d))
    return pids


def _sanitizer_env():
    """Point every sanitizer's reports at SAN_DIR; stop at the first report.

    Options already in the environment come last, so they win."""
    common = "log_path=%s/%%s:halt_on_error=1:print_stacktrace=1" % SAN_DIR
    supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sanitizer")
    extra = {
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0",
        "UBSAN_OPTIONS": "",
        "LSAN_OPTIONS": "suppressions=%s" % os.path.realpath(os.path.join(supp, "lsan.supp")),
        "TSAN_OPTIONS": "second_deadlock_stack=1:suppressions=%s"
                        % os.path.realpath(os.path.join(supp, "tsan.supp")),
    }
    for var, more in extra.items():
        tool = var.split("_")[0].lower()
        opts = common % tool + (":" + more if more else "")
        if os.environ.get(var):
            opts += ":" + os.environ[var]
        os.environ[var] = opts


_san_seen = set()


def sanitizer_reports(pid=None):
    """New sanitizer report files (all, or those of one pid) as [(path, text)];
    each is returned once."""
    out = []
    if SAN_DIR is None:  # a test file with its own main(): no sanitizer dir
        return out
    try:
        names = sorted(os.listdir(SAN_DIR))
    except OSError:
        return out
    for n in names:
        path = os.path.join(SAN_DIR, n)
        if path in _san_seen or (pid is not None and not n.endswith(".%d" % pid)):
            continue
        _san_seen.add(path)
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        out.append((path, text))
    return out


def format_reports(reports, n=80):
    return "\n".join("--- %s ---\n%s" % (p, "".join(t.splitlines(True)[:n]))
                     for p, t in reports)


def log_tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return "(no log)"
    return "".join(lines[-n:]) or "(empty log)"


def _log_path(tag):
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", "%s.%s" % (_current_test[0], tag))
    return os.path.join(LOG_DIR, name + ".log")


# --------------------------------------------------------------------------
# mounts


class MountError(AssertionError):
    pass


class Mount:
    """A spillway daemon in the foreground on a fresh temp mountpoint.

    hot_dir defaults to a not-yet-existing directory inside a fresh temp dir on
    /dev/shm, so the daemon creates it. `opts` are extra -o options. `prefix`
    goes before the program (a wrapper such as fiu-run), `env` replaces the
    daemon's environment (None: this process's). Use as a context manager;
    stop() is idempotent and runs on every exit path.
    """

    def __init__(self, hot_size="512M", opts=(), hot_dir=None, args=(), tag="mnt", prefix=(),
                 env=None):
        self.hot_size = hot_size
        self.opts = list(opts)
        self.args = list(args)
        self.tag = tag
        self.prefix = list(prefix)
        self.env = env
        self.base = make_tmpdir()
        self.mnt = os.path.join(self.base, "mnt")
        os.mkdir(self.mnt)
        self.shm = make_tmpdir(on_shm=True)
        # hot_dir=False: pass no hot_dir option (the daemon's default)
        self.hot_dir = os.path.join(self.shm, "hot") if hot_dir is None else hot_dir
        self.log = _log_path(tag)
        self.proc = None
        self.problems = []
        self.stopped = False
        self.killed_by_watchdog = False
        # tests that stall the daemon on purpose (SIGSTOP, fault proxies) opt out
        self.check_requests = True

    # paths
    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self, n=60):
        return log_tail(self.log, n)

    def hot_files(self):
        """hot_dir entries that are hot files (daemon-private files left out)."""
        return sorted(n for n in os.listdir(self.hot_dir) if n not in DAEMON_FILES)

    def option_string(self):
        o = []
        if self.hot_dir is not False:
            o.append("hot_dir=" + self.hot_dir)
        if self.hot_size is not None:
            o.append("hot_size=" + str(self.hot_size))
        return ",".join(o + self.opts)

    def argv(self):
        """The command line start() runs."""
        a = self.prefix + [SPILLWAY, "-f"] + self.args
        ostr = self.option_string()
        if ostr:
            a += ["-o", ostr]
        return a + [self.mnt]

    def start(self):
        argv = self.argv()
        with _live_lock:
            _live.append(self)
        try:
            with open(self.log, "wb") as logf:
                logf.write(("$ %s\n" % " ".join(argv)).encode())
                logf.flush()
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                             stderr=logf, preexec_fn=_pdeathsig,
                                             start_new_session=True, env=self.env)
            deadline = time.monotonic() + MOUNT_DEADLINE
            while not is_mounted(self.mnt):
                rc = self.proc.poll()
                if rc is not None:
                    raise MountError("spillway exited with status %d before mounting %s\n"
                                     "--- log %s ---\n%s" % (rc, self.mnt, self.log,
                                                             self.log_text()))
                if time.monotonic() > deadline:
                    raise MountError("%s did not appear in /proc/mounts within %.0fs\n"
                                     "--- log %s ---\n%s" % (self.mnt, MOUNT_DEADLINE,
                                                             self.log, self.log_text()))
                time.sleep(0.005)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Unmount, make sure the daemon is gone, remove temp dirs.

        Returns a list of problems that point at the daemon (crash, refusal to
        exit after unmount, non-zero exit status).
        """
        if self.stopped:
            return self.problems
        self.stopped = True
        try:
            self._stop()
        except BaseException:
            self.stopped = False  # interrupted (timeout/signal): let cleanup_all retry
            raise
        with _live_lock:
            if self in _live:
                _live.remove(self)
        return self.problems

    def slow_request(self):
        """(op, seconds) of the slowest request the live daemon served, or None."""
        try:
            r = subprocess.run(["getfattr", "--only-values", "-n", "user.spillway.stats",
                                self.mnt], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               timeout=10)
            sr = json.loads(r.stdout.decode())["slow_request"]
            return sr["op"], sr["ms"] / 1000.0
        except (subprocess.TimeoutExpired, ValueError, KeyError, OSError):
            return None

    def _check_requests(self):
        """A request slower than twice the longest configured bound is a bug."""
        if not self.check_requests or self.proc is None or self.proc.poll() is not None:
            return
        if not is_mounted(self.mnt):
            return
        sr = self.slow_request()
        bound = 2 * request_bound(self.opts)
        if sr and sr[1] > bound:
            self.problems.append("a %s request took %.1fs, over twice the longest configured "
                                 "wait (%.0fs)" % (sr[0], sr[1], bound / 2))

    def _stop(self):
        p = self.proc
        died_early = p is not None and p.poll() is not None
        if died_early and not self.killed_by_watchdog:
            self.problems.append("daemon died during the test (status %s)" % p.returncode)
        if not died_early and not self.killed_by_watchdog:
            self._check_requests()
        how = force_unmount(self.mnt)
        if how.startswith("FAILED"):
            self.problems.append("could not unmount %s: %s" % (self.mnt, how))
        if p is not None and p.poll() is None:
            if how == "fusermount3":
                try:
                    p.wait(timeout=EXIT_DEADLINE)
                except subprocess.TimeoutExpired:
                    self.problems.append("daemon still running %.0fs after a clean unmount"
                                         % EXIT_DEADLINE)
            if p.poll() is None:
                sig = kill_pid(p.pid, p)
                if sig == signal.SIGKILL:
                    self.problems.append("daemon ignored SIGTERM; needed SIGKILL")
            if p.poll() is None:
                p.wait()
        if (p is not None and not died_early and how == "fusermount3"
                and p.returncode not in (0, None) and not self.problems):
            self.problems.append("daemon exited with status %d after a clean unmount"
                                 % p.returncode)
        if is_mounted(self.mnt):
            force_unmount(self.mnt)
        if is_mounted(self.mnt):
            self.problems.append("%s is still mounted; left in place" % self.mnt)
        if p is not None:
            reports = sanitizer_reports(p.pid)
            if reports:
                self.problems.append("sanitizer report(s):\n" + format_reports(reports))
        remove_tmpdir(self.base)
        remove_tmpdir(self.shm)
        if self.problems:
            with open(self.log, "a") as f:
                f.write("\n[harness] problems: %s\n" % "; ".join(self.problems))

    def abort(self):
        """Watchdog: kill the daemon so hung FUSE requests fail with ENOTCONN."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed_by_watchdog = True
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        problems = self.stop()
        if problems and et is None:
            raise MountError("spillway on %s: %s\n--- log %s ---\n%s"
                             % (self.mnt, "; ".join(problems), self.log, self.log_text()))
        if problems:
            sys.stderr.write("[harness] %s: %s (log %s)\n"
                             % (self.mnt, "; ".join(problems), self.log))
        return False


class Spawned:
    """A spillway run that is expected to fail (or to daemonize): tracks the
    mountpoint so that anything it mounted after all is cleaned up."""

    def __init__(self, mnt):
        self.mnt = mnt
        self.pids = []
        with _live_lock:
            _live.append(self)

    def abort(self):
        for pid in self.pids + find_daemon_pids(self.mnt):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        found = "not mounted"
        if is_mounted(self.mnt):
            found = force_unmount(self.mnt)
        for pid in set(self.pids + find_daemon_pids(self.mnt)):
            if _pid_alive(pid):
                try:
                    wait_until(lambda: not _pid_alive(pid), EXIT_DEADLINE, "daemon exit")
                except AssertionError:
                    kill_pid(pid)
        with _live_lock:
            if self in _live:
                _live.remove(self)
        return found


def run_spillway(args, mnt, timeout=10, env=None):
    """Run spillway with args (mnt is the mountpoint it may touch).

    Returns (returncode or None on timeout, stdout, stderr, was_mounted). Any
    mount or daemon it leaves behind is removed before returning.
    """
    sp = Spawned(mnt)
    try:
        p = subprocess.Popen([SPILLWAY] + list(args), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_pdeathsig, start_new_session=True, env=env)
        sp.pids.append(p.pid)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            was_mounted = is_mounted(mnt)
            force_unmount(mnt)
            kill_pid(p.pid, p)
            out, err = p.communicate()
            return None, out.decode(errors="replace"), err.decode(errors="replace"), was_mounted
        was_mounted = is_mounted(mnt)
        return rc, out.decode(errors="replace"), err.decode(errors="replace"), was_mounted
    finally:
        sp.stop()


def make_tmpdir(on_shm=False):
    """A temp dir removed by remove_tmpdir() or, at the latest, cleanup_all()."""
    d = tempfile.mkdtemp(prefix="spw-it-", dir="/dev/shm" if on_shm else None)
    with _live_lock:
        _tmp_dirs.add(d)
    return d


def remove_tmpdir(d):
    """rmtree d unless something is still mounted inside it."""
    with _live_lock:
        _tmp_dirs.discard(d)
    with open("/proc/mounts") as f:
        mounted = [_unescape_mount_field(ln.split()[1]) for ln in f if len(ln.split()) > 1]
    if any(m == d or m.startswith(d + "/") for m in mounted):
        sys.stderr.write("[harness] not removing %s: something is mounted inside\n" % d)
        return
    shutil.rmtree(d, ignore_errors=True)


def cleanup_all():
    with _live_lock:
        items = list(_live)
    for m in items:
        try:
            m.stop()
        except Exception as e:  # keep going: every mount must be tried
            sys.stderr.write("[harness] cleanup of %s failed: %r\n" % (m.mnt, e))
    with _live_lock:
        dirs = list(_tmp_dirs)
    for d in dirs:
        remove_tmpdir(d)


# --------------------------------------------------------------------------
# per-test timeout


class TestTimeout(AssertionError):
    pass


# The SIGALRM handler raises only while test code runs (armed, see
# SpwTestCase._guard); arriving elsewhere (unittest internals, cleanups) it
# leaves the timeout pending, to be raised at the start of the next guarded
# part or reported by the watchdog's cancel().
_armed = [False]
_pending = [None]


def _on_alarm(signum, frame):
    msg = "test %s exceeded its timeout" % _current_test[0]
    if _armed[0]:
        _armed[0] = False
        raise TestTimeout(msg)
    _pending[0] = msg


class Watchdog:
    """Phase 1 (timeout): SIGALRM in the main thread raises TestTimeout.
    Phase 2 (+5s): kill every live daemon so a request stuck in the kernel
    returns ENOTCONN. Phase 3 (+20s): clean up everything and exit(1)."""

    def __init__(self, timeout, name):
        self.timeout = timeout
        self.name = name
        self.done = threading.Event()
        self.fired = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        if self.done.wait(self.timeout):
            return
        self.fired = True
        sys.stderr.write("\n[harness] TIMEOUT: %s ran longer than %ss\n"
                         % (self.name, self.timeout))
        signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
        if self.done.wait(5):
            return
        sys.stderr.write("[harness] %s still stuck: killing daemons to abort FUSE requests\n"
                         % self.name)
        with _live_lock:
            items = list(_live)
        for m in items:
            m.abort()
        if self.done.wait(20):
            return
        sys.stderr.write("[harness] %s still stuck: cleaning up and exiting\n" % self.name)
        cleanup_all()
        os._exit(1)

    def cancel(self):
        """Last cleanup of a test: stop the watchdog; a timeout that hit
        outside test code (e.g. a slow unmount) fails the test here."""
        self.done.set()
        msg, _pending[0] = _pending[0], None
        if msg:
            raise TestTimeout(msg + " (outside the test body)")


# --------------------------------------------------------------------------
# parity: the same operations on native tmpfs and on the mount


def stat_summary(st):
    """The parts of a stat that must match tmpfs (not ino/dev/times/blocks)."""
    fmt = stat.S_IFMT(st.st_mode)
    kind = {stat.S_IFREG: "reg", stat.S_IFDIR: "dir", stat.S_IFLNK: "lnk",
            stat.S_IFIFO: "fifo", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk",
            stat.S_IFSOCK: "sock"}.get(fmt, oct(fmt))
    d = {"type": kind, "mode": oct(stat.S_IMODE(st.st_mode)), "nlink": st.st_nlink,
         "uid": st.st_uid, "gid": st.st_gid}
    if kind in ("reg", "lnk"):
        d["size"] = st.st_size
    return d


def _normalize(v):
    if isinstance(v, os.stat_result):
        return stat_summary(v)
    if isinstance(v, os.statvfs_result):
        return "statvfs"
    if isinstance(v, (list, tuple)):
        return [_normalize(x) for x in v]
    return v


class Recorder:
    """Runs labelled operations under root; records each outcome as
    ('ok', value) or ('err', 'ENAME'). Paths given to helpers are relative."""

    def __init__(self, root):
        self.root = root
        self.log = []
        self.fds = []

    def p(self, *parts):
        return os.path.join(self.root, *parts)

    def _rec(self, label, fn, args, kw, keep):
        try:
            r = fn(*args, **kw)
        except OSError as e:
            self.log.append((label, ("err", errno.errorcode.get(e.errno, str(e.errno)))))
            return None
        self.log.append((label, ("ok", _normalize(r) if keep else None)))
        return r

    def do(self, label, fn, *args, **kw):
        """Call fn and record its outcome including its (normalized) value."""
        return self._rec(label, fn, args, kw, True)

    def call(self, label, fn, *args, **kw):
        """Call fn and record only success or errno (value differs by design)."""
        return self._rec(label, fn, args, kw, False)

    def note(self, label, value):
        self.log.append((label, ("val", _normalize(value))))

    def stat(self, rel, follow=False):
        return self.do("stat " + rel, os.stat, self.p(rel), follow_symlinks=follow)

    def open(self, rel, flags, mode=0o644):
        fd = self.call("open %s %s" % (rel, _flag_names(flags)), os.open, self.p(rel), flags, mode)
        if fd is not None:
            self.fds.append(fd)
        return fd

    def close(self, fd):
        if fd is None:
            return
        self.fds.remove(fd)
        self.call("close", os.close, fd)

    def close_all(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def _flag_names(flags):
    names = []
    for n in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC", "O_APPEND", "O_DIRECTORY",
              "O_NOFOLLOW", "O_NONBLOCK", "O_PATH"):
        v = getattr(os, n, 0)
        if v and flags & v == v:
            names.append(n)
    return "|".join(names) or "O_RDONLY"


def _short(v, n=160):
    r = repr(v)
    return r if len(r) <= n else r[:n] + "...(%d chars)" % len(r)


def format_diff(a, b):
    lines = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else ("<missing>", None)
        y = b[i] if i < len(b) else ("<missing>", None)
        mark = "  " if x == y else "!!"
        lines.append("%s %-40s tmpfs=%s" % (mark, _short(x[0], 40), _short(x[1])))
        if x != y:
            lines.append("%s %-40s spill=%s" % (mark, _short(y[0], 40), _short(y[1])))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# ctypes wrappers for calls Python's os module lacks

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
XATTR_CREATE = getattr(os, "XATTR_CREATE", 1)
XATTR_REPLACE = getattr(os, "XATTR_REPLACE", 2)
AT_FDCWD = -100

libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def renameat2(old, new, flags):
    if libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# --------------------------------------------------------------------------
# test case base classes


class SpwTestCase(unittest.TestCase):
    """Base: a watchdog per test (timeout seconds, covering setUp..cleanup)."""

    timeout = 60

    def setUp(self):
        _current_test[0] = self.id().split(".", 1)[-1]
        _pending[0] = None
        wd = Watchdog(self.timeout * TIME_SCALE, self.id())
        # registered first, so it runs last: it also covers unmounting
        self.addCleanup(wd.cancel)
        # then this: after every mount is stopped, any program's report fails
        self.addCleanup(self._check_sanitizers)

    def _check_sanitizers(self):
        reports = sanitizer_reports()
        if reports:
            raise AssertionError("sanitizer report(s) during %s:\n%s"
                                 % (self.id(), format_reports(reports)))

    def _guard(self, fn, *args, **kw):
        if _pending[0]:
            msg, _pending[0] = _pending[0], None
            raise TestTimeout(msg)
        _armed[0] = True
        try:
            return fn(*args, **kw)
        finally:
            _armed[0] = False

    # unittest (3.8+) runs each part through these; only setUp, the test and
    # tearDown are guarded, cleanups (unmounting) are never interrupted.
    def _callSetUp(self):
        self._guard(super()._callSetUp)

    def _callTestMethod(self, method):
        self._guard(super()._callTestMethod, method)

    def _callTearDown(self):
        self._guard(super()._callTearDown)

    def tmpdir(self, on_shm=False):
        d = make_tmpdir(on_shm)
        self.addCleanup(remove_tmpdir, d)
        return d

    def mount(self, **kw):
        """Start a Mount for this test; it is stopped (and checked) at cleanup."""
        m = Mount(**kw)
        m.start()
        self.addCleanup(self._stop_mount, m)
        return m

    def _stop_mount(self, m):
        problems = m.stop()
        if problems:
            raise MountError("spillway on %s: %s\n--- log %s ---\n%s"
                             % (m.mnt, "; ".join(problems), m.log, m.log_text()))


class MountedTestCase(SpwTestCase):
    """A fresh mount (self.m) and a fresh native tmpfs dir (self.native)."""

    mount_kw = {}

    def setUp(self):
        super().setUp()
        self.native = self.tmpdir(on_shm=True)
        self.m = self.mount(**self.mount_kw)
        self.mnt = self.m.mnt

    def run_both(self, scenario):
        """Run scenario(Recorder) on tmpfs and on the mount; return both logs."""
        logs = []
        for root in (self.native, self.mnt):
            r = Recorder(root)
            try:
                scenario(r)
            finally:
                r.close_all()
            logs.append(r.log)
        return logs

    def assertParity(self, scenario):
        a, b = self.run_both(scenario)
        if a != b:
            self.fail("spillway differs from tmpfs:\n" + format_diff(a, b))
        return a

    def hot_entries(self):
        return sorted(os.listdir(self.m.hot_dir))


# --------------------------------------------------------------------------
# entry point


def _on_fatal_signal(signum, frame):
    sys.stderr.write("\n[harness] got signal %d: cleaning up mounts\n" % signum)
    cleanup_all()
    os._exit(128 + signum)


def _build_sanitizers(build):
    """SPW_SANITIZE of the build dir's CMake cache ("" when none)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("SPW_SANITIZE:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def main():
    global BUILD_DIR, SPILLWAY, LOG_DIR, SAN_DIR, SANITIZE, TIME_SCALE, MOUNT_DEADLINE
    global EXIT_DEADLINE
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD"))
    ns, rest = ap.parse_known_args()
    if not os.path.exists("/dev/fuse"):
        print("SKIP: /dev/fuse is absent")
        sys.exit(77)
    if not ns.build:
        sys.stderr.write("usage: %s --build BUILD_DIR [unittest args]\n" % sys.argv[0])
        sys.exit(2)
    BUILD_DIR = os.path.abspath(ns.build)
    SPILLWAY = os.path.join(BUILD_DIR, "spillway")
    if not os.access(SPILLWAY, os.X_OK):
        sys.stderr.write("FAIL: %s is missing or not executable\n" % SPILLWAY)
        sys.exit(1)
    LOG_DIR = os.path.join(BUILD_DIR, "integration-logs")
    os.makedirs(LOG_DIR, exist_ok=True)
    SAN_DIR = os.path.join(LOG_DIR, "sanitizer-%d" % os.getpid())
    shutil.rmtree(SAN_DIR, ignore_errors=True)
    os.makedirs(SAN_DIR)
    _sanitizer_env()
    SANITIZE = _build_sanitizers(BUILD_DIR)
    if SANITIZE:
        TIME_SCALE = 5 if "thread" in SANITIZE else 3
        MOUNT_DEADLINE *= TIME_SCALE
        EXIT_DEADLINE *= TIME_SCALE
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, _on_fatal_signal)
    signal.signal(signal.SIGALRM, _on_alarm)
    os.umask(0o022)  # parity tests compare modes
    atexit.register(cleanup_all)
    prog = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False)
    cleanup_all()
    late = sanitizer_reports()  # e.g. from a daemon that outlived its test
    if late:
        sys.stderr.write("[harness] sanitizer report(s) outside any test:\n%s\n"
                         % format_reports(late))
    if not os.listdir(SAN_DIR):
        os.rmdir(SAN_DIR)
    sys.exit(0 if prog.result.wasSuccessful() and not late else 1)
