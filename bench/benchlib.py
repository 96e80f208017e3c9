"""benchlib - what the spillway benches share (imported, never run).

The mount table (/proc/self/mountinfo), one Cleanup that owns every daemon,
mount, temp dir and memory cgroup (bench/tight.py) a bench creates and
releases them in reverse order, daemon
start/stop with timeouts, client tools run under a timeout that aborts hung
FUSE connections, the environment block of a report, table and number
formatting, /proc readers, and run_guarded(), the signal/cleanup/exit-status
frame every bench's main() runs its body in. Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
KiB = 1024
MiB = 1 << 20
GiB = 1 << 30

MOUNT_TIMEOUT = 15.0  # seconds for a daemon to show up in mountinfo
STOP_TIMEOUT = 10.0  # seconds for a daemon to exit after unmount


class BenchError(Exception):
    pass


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def parse_size(text):
    """'1G' -> 1073741824 (K/M/G/T suffixes, powers of 1024, as spillway's options)."""
    t = text.strip().upper()
    if t.endswith("IB"):
        t = t[:-2]
    elif t.endswith("B"):
        t = t[:-1]
    mult = 1
    for i, suf in enumerate("KMGT", start=1):
        if t.endswith(suf):
            mult = 1024**i
            t = t[:-1]
            break
    try:
        val = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError("bad size: %r" % text)
    if val <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % text)
    return val * mult


def fmt_size(n):
    for suf, mult in (("G", GiB), ("M", MiB), ("K", 1024)):
        if n % mult == 0:
            return "%d%s" % (n // mult, suf)
    return str(n)


# --------------------------------------------------------------------------
# The mount table


def _unescape(s):
    """Octal escapes of /proc/self/mountinfo (\\040 for a space...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mountinfo():
    """[(mount point, fstype)] from /proc/self/mountinfo, octal escapes decoded."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            try:
                fstype = fields[fields.index("-", 6) + 1]
            except (ValueError, IndexError):
                continue
            out.append((_unescape(fields[4]), fstype))
    return out


def mountpoints():
    """Set of mount points."""
    return {m for m, _ in mountinfo()}


def is_mounted(path):
    return os.path.realpath(path) in mountpoints()


# --------------------------------------------------------------------------
# Resource tracking and cleanup: every daemon, mount and temp dir the bench
# creates is registered here first and released in reverse order.


class Cleanup:
    def __init__(self):
        self.daemons = []  # (name, Popen, mountpoint, log path)
        self.dirs = []  # temp dirs, removed last, only when nothing is mounted in them
        self.cgroups = []  # tight.Cgroup: their clients die first, the rest after the daemons

    def add_dir(self, path):
        self.dirs.append(path)
        return path

    def add_cgroup(self, cg):
        self.cgroups.append(cg)
        return cg

    def kill_daemons(self):
        """SIGKILL every daemon: aborts its FUSE connection, unblocking stuck clients."""
        for _, proc, _, _ in self.daemons:
            if proc.poll() is None:
                proc.kill()

    def stop_daemon(self, name, proc, mnt):
        if is_mounted(mnt):
            r = subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True, text=True)
            if r.returncode != 0 and is_mounted(mnt):
                log("%s: fusermount3 -u failed: %s" % (name, r.stderr.strip()))
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log("%s: pid %d still running after unmount, SIGTERM" % (name, proc.pid))
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log("%s: pid %d ignored SIGTERM, SIGKILL" % (name, proc.pid))
                proc.kill()
                proc.wait()
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        if is_mounted(mnt):
            log("%s: %s is still mounted" % (name, mnt))
            return False
        return True

    def run(self):
        ok = True
        # the clients in a cgroup (a Ray job) end before the mounts they use
        spare = {proc.pid for _, proc, _, _ in self.daemons}
        for cg in self.cgroups:
            cg.kill(spare=spare, wait=5)
        for name, proc, mnt, _ in reversed(self.daemons):
            ok = self.stop_daemon(name, proc, mnt) and ok
        self.daemons = []
        for cg in reversed(self.cgroups):
            ok = cg.remove() and ok
        self.cgroups = []
        mounted = mountpoints()
        for d in reversed(self.dirs):
            real = os.path.realpath(d)
            if any(m == real or m.startswith(real + "/") for m in mounted):
                log("leaving %s: something is still mounted inside it" % d)
                ok = False
                continue
            shutil.rmtree(d, ignore_errors=True)
        self.dirs = []
        return ok


CLEANUP = Cleanup()


def on_signal(signum, frame):
    raise BenchError("interrupted by signal %d" % signum)


# --------------------------------------------------------------------------
# Running tools


def run_tool(args, timeout, what):
    """Run a client command; on timeout kill it and every daemon (a FUSE hang
    can only be broken by aborting the connection). Returns stdout."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        reap(proc)
        raise BenchError("%s: timed out after %ds" % (what, timeout))
    except BaseException:  # a signal: the client must be gone before cleanup
        reap(proc)
        raise
    if proc.returncode != 0:
        raise BenchError(
            "%s: exit %d: %s" % (what, proc.returncode, (err or out).strip()[-2000:])
        )
    return out


def reap(proc):
    """Kill a client and wait for it. A client stuck in a FUSE request cannot
    die until its connection goes away, so after a grace period every daemon
    is SIGKILLed (which aborts the connection)."""
    proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log("pid %d stuck (in a FUSE request?): killing the daemons" % proc.pid)
        CLEANUP.kill_daemons()
        proc.wait()
    proc.communicate()


def fio_mibs(args, path, rw, size, timeout):
    """Run fio (args: the command and its job options, without the output
    format) for a sequential rw ("read" or "write", which ends with an fsync)
    of size bytes at path. Returns MiB/s once fio says it moved them all."""
    args = args + ["--output-format=json"] + (["--end_fsync=1"] if rw == "write" else [])
    out = run_tool(args, timeout, "fio %s on %s" % (rw, path))
    try:
        job = json.loads(out[out.index("{") :])["jobs"][0]
    except (ValueError, KeyError, IndexError) as e:
        raise BenchError("fio %s: cannot parse output (%s): %s" % (rw, e, out[:500]))
    if job.get("error"):
        raise BenchError("fio %s on %s: error %s" % (rw, path, job["error"]))
    st = job[rw]
    if st["io_bytes"] != size:
        raise BenchError(
            "fio %s on %s: moved %d bytes, expected %d" % (rw, path, st["io_bytes"], size)
        )
    # too fast for fio's ms clock: report from a 1 ms floor
    runtime_ms = st.get("runtime") or job.get("job_runtime") or 1
    return size / MiB / (runtime_ms / 1000.0)


def drop_caches(level=3):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("%d\n" % level)


# --------------------------------------------------------------------------
# Daemons


def raise_nofile():
    """Lift our RLIMIT_NOFILE (inherited by both FUSE daemons) as far as allowed:
    to fs.nr_open with CAP_SYS_RESOURCE, else soft = hard. Returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:
            n = int(f.read())
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    except (OSError, ValueError):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def start_daemon(name, args, mnt, logpath, env=None, preexec_fn=None):
    """Start a FUSE daemon (preexec_fn runs in the child before exec: a
    tight.Cgroup's preexec puts it in a memory cgroup) and wait until it
    mounted mnt and answers."""
    logf = open(logpath, "w")
    proc = subprocess.Popen(
        args,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=logf,
        stderr=subprocess.STDOUT,
        preexec_fn=preexec_fn,
    )
    logf.close()
    CLEANUP.daemons.append((name, proc, mnt, logpath))
    deadline = time.monotonic() + MOUNT_TIMEOUT
    while not is_mounted(mnt):
        if proc.poll() is not None:
            raise BenchError(
                "%s exited with %d before mounting:\n%s" % (name, proc.returncode, tail(logpath))
            )
        if time.monotonic() > deadline:
            raise BenchError(
                "%s did not mount %s within %ds:\n%s" % (name, mnt, MOUNT_TIMEOUT, tail(logpath))
            )
        time.sleep(0.05)
    # The mount exists once the kernel accepted it; make sure the daemon answers
    # (in a child, so a daemon that never replies costs a timeout, not a hang).
    run_tool(["stat", "-c", "%i", mnt], MOUNT_TIMEOUT, "stat of %s's root" % name)
    return proc


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def print_daemon_logs():
    for name, proc, _, logpath in CLEANUP.daemons:
        state = "running" if proc.poll() is None else "exited %d" % proc.returncode
        log("%s (pid %d, %s) log tail:\n%s" % (name, proc.pid, state, tail(logpath)))


class Watchdog:
    """Bound an in-process call that goes through a FUSE mount: when it
    overruns, every daemon is SIGKILLed (aborting its connection, so the
    blocked syscall returns ENOTCONN) and BenchError is raised."""

    def __init__(self, seconds, what):
        self.seconds, self.what, self.fired = seconds, what, False

    def _fire(self):
        self.fired = True
        log("%s: no answer after %ds, killing the daemons" % (self.what, self.seconds))
        CLEANUP.kill_daemons()

    def __enter__(self):
        self.timer = threading.Timer(self.seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.timer.cancel()
        if self.fired:
            raise BenchError("%s: timed out after %ds" % (self.what, self.seconds))
        return False


def work_roots(tag, opts):
    """Temp dirs held by CLEANUP: mnt and logs in /tmp, cold under
    opts.cold_root, shm under opts.tmpfs_root (named spw-<tag>-...)."""
    return {
        "mnt": CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-%s-mnt-" % tag)),
        "logs": CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-%s-logs-" % tag)),
        "cold": CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-%s-" % tag, dir=opts.cold_root)),
        "shm": CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-%s-" % tag, dir=opts.tmpfs_root)),
    }


def run_guarded(body, catch=(), describe=str, on_failure=None, after_cleanup=None):
    """Run body() with SIGINT/SIGTERM/SIGHUP raising BenchError. A BenchError,
    an OSError or one of catch is logged as "FAILED: describe(e)" with the
    daemons' log tails, then on_failure() runs. Whatever happens, everything
    CLEANUP holds is released (further signals ignored meanwhile), then
    after_cleanup() runs. Returns the exit status: 0 when body returned and the
    cleanup left nothing behind, 1 otherwise."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    ok = False
    try:
        body()
        ok = True
    except (BenchError, OSError) + tuple(catch) as e:
        log("FAILED: %s" % describe(e))
        print_daemon_logs()
        if on_failure:
            on_failure()
    finally:
        # Further signals must not interrupt the cleanup itself.
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if not CLEANUP.run():
            log("FAILED: cleanup left something behind")
            ok = False
        if after_cleanup:
            after_cleanup()
    return 0 if ok else 1


# --------------------------------------------------------------------------
# /proc readers


def proc_status(pid):
    """VmRSS and VmHWM of pid in bytes (0 when unknown)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in out:
                    out[k] = int(v.split()[0]) * KiB
    except (OSError, ValueError, IndexError):
        pass
    return out


def cpu_times(pid):
    """(user, sys) CPU seconds of pid so far, or None (gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        clk = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / clk, int(fields[12]) / clk
    except (OSError, IndexError, ValueError):
        return None


def meminfo(keys=("Slab", "SReclaimable", "SUnreclaim", "Shmem")):
    """{key: bytes} of the /proc/meminfo lines named in keys (a tuple)."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0]) * KiB
    return out


# --------------------------------------------------------------------------
# Report


def cmd_first_line(args):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (r.stdout or r.stderr).strip()
    return text.splitlines()[0] if text else "?"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, or "?"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def git_rev():
    """The checkout's short revision, "+dirty" when tracked files are changed."""
    rev = cmd_first_line(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(
        ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def environment(opts):
    cpu = cpu_model()
    env = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "cpu": "%s, %d cpus" % (cpu, os.cpu_count() or 0),
        "memory": "%d MiB" % (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MiB),
        "fio": cmd_first_line(["fio", "--version"]),
        "libfuse": cmd_first_line(["pkg-config", "--modversion", "fuse3"]),
        "tmpfs": opts.tmpfs_root,
        "load": loadavg(),
        "nice": os.nice(0),
    }
    if "spillway" in opts.targets:
        env["spillway"] = "%s (git %s)" % (opts.spillway_bin, git_rev())
        if opts.spillway_opts or opts.spillway_env:
            env["spillway"] += " with " + " ".join(
                opts.spillway_env + (["-o " + opts.spillway_opts] if opts.spillway_opts else [])
            )
    return env


def cold_fs(path):
    """'ext4 on /dev/vda (rotational=1, scheduler [mq-deadline] ...)'."""
    r = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE,FSTYPE,TARGET", "-T", path], capture_output=True, text=True
    )
    f = r.stdout.split()
    if len(f) < 3:
        return "?"
    src, fstype, target = f[0], f[1], f[2]
    desc = "%s on %s (mounted at %s" % (fstype, src, target)
    dev = os.path.basename(os.path.realpath(src))
    q = "/sys/class/block/%s/queue" % dev
    if not os.path.isdir(q) and os.path.isdir("/sys/class/block/%s/.." % dev):
        q = os.path.realpath("/sys/class/block/%s/../queue" % dev)  # a partition
    try:
        with open(q + "/rotational") as fr:
            desc += ", rotational=%s" % fr.read().strip()
        with open(q + "/scheduler") as fs:
            desc += ", scheduler %s" % fs.read().strip()
    except OSError:
        pass
    st = os.statvfs(path)
    return desc + ", %d GiB free)" % (st.f_bavail * st.f_frsize // GiB)


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_val(v, unit):
    if v is None:
        return "-"
    if unit == "MiB/s":
        return "%.0f" % v if v >= 100 else "%.1f" % v
    if unit == "x":
        return "%.2f" % v
    return "{:,.0f}".format(v)


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return "%.2fx" % (a / b)


def print_table(head, rows, left):
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]

    def line(x):
        return "  ".join(
            (c.ljust(widths[i]) if i in left else c.rjust(widths[i])) for i, c in enumerate(x)
        ).rstrip()

    print(line(head))
    print(line(["-" * w for w in widths]))
    for x in rows:
        print(line(x))
