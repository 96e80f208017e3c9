"""tight - a process tree in one memory cgroup: the node spillway is for, a
node whose RAM the job has taken (issue 35). Imported, never run.

    cg = tight.create(1536 * MiB, "ray-plain")   # registered with benchlib.CLEANUP
    tight.drop_caches()                          # before each run
    subprocess.Popen(argv, preexec_fn=cg.preexec)  # the child and all it starts
    ...
    w = cg.watch()                               # samples the working set
    ...
    w.stop()     # its peak: usage less the inactive page cache
    cg.usage()   # {"peak", "oom_kills", "user_s", "sys_s", "stall_some_s", ...}
    cg.remove()  # kill what is left, rmdir (Cleanup does it on every exit path)

Everything a job starts after joining stays in the cgroup (children inherit
it), so its page cache, its tmpfs pages (a spillway hot tier, Ray's
/dev/shm object store) and its anonymous memory are all charged to the one
limit: the kernel charges a page to the cgroup of the process that first
touches it. Reclaim and the OOM killer act inside the cgroup only.

cgroup v1 (a "memory" hierarchy mounted, as on this project's VMs): the
memory cgroup is made a child of the nearest cgroup, starting from the one
this process runs in (/process_api/<id> here), where mkdir is allowed; its
parent's use_hierarchy says whether ancestors' limits apply too, and the
effective limit (memory.stat hierarchical_memory_limit) is checked against
the one asked for. cpuacct is a hierarchy of its own on v1 (unless it is
co-mounted with memory): a cpuacct cgroup of the same name is made beside,
and a process joins both. The memory+swap limit is set to the same value
when the file exists, so swap never stretches the node.

cgroup v2 (the unified hierarchy, with the memory controller in it): the
cgroup is made where the memory controller is enabled for children, from the
process's own cgroup up (a cgroup with processes of its own cannot enable
controllers for children: then its parent is used, where the process's own
cgroup is itself a child). cpu.stat (usage/user/system) is in every v2 cgroup.

Readings: peak memory (v1 memory.max_usage_in_bytes, v2 memory.peak), OOM
kills (v1 memory.oom_control oom_kill / under_oom, v2 memory.events
oom_kill), CPU seconds of every process that ran in it, user and system (v1
cpuacct.usage_user/usage_sys, v2 cpu.stat user_usec/system_usec), refaults
and time stalled on memory (v2: the cgroup's PSI; v1 has none per cgroup:
the machine's, since the cgroup was made). Work the kernel does for the
cgroup in its own threads (writeback flushers, kswapd) is charged to no
cgroup's CPU.

Unit-less: sizes in bytes, times in seconds. Python 3 standard library only.
"""

import errno
import os
import signal
import threading
import time

import benchlib

PREFIX = "spw-tight"
KILL_WAIT = 10.0  # seconds for the processes of a cgroup to die after SIGKILL


class TightError(Exception):
    pass


def drop_caches():
    """sync, then drop the page cache, dentries and inodes (the whole machine's)."""
    benchlib.drop_caches(3)


def _read(path):
    with open(path) as f:
        return f.read()


def _kv(path):
    out = {}
    for line in _read(path).splitlines():
        f = line.split()
        if len(f) == 2:
            out[f[0]] = int(f[1])
    return out


def _psi(path):
    """(some, full) total seconds stalled from a PSI file; (None, None) if absent."""
    out = {}
    try:
        for line in _read(path).splitlines():
            f = line.split()
            out[f[0]] = int(dict(x.split("=") for x in f[1:])["total"]) / 1e6
    except (OSError, ValueError, KeyError, IndexError):
        return None, None
    return out.get("some"), out.get("full")


def _write(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# Where the hierarchies are


def _mounts():
    """[(mount point, root inside the hierarchy, fstype, super options)] of
    cgroup and cgroup2 mounts (/proc/self/mountinfo)."""
    out = []
    for line in _read("/proc/self/mountinfo").splitlines():
        f = line.split()
        try:
            sep = f.index("-", 6)
        except ValueError:
            continue
        fstype = f[sep + 1]
        if fstype in ("cgroup", "cgroup2"):
            out.append((benchlib._unescape(f[4]), benchlib._unescape(f[3]), fstype,
                        set(f[sep + 3].split(","))))
    return out


def _own(pid="self"):
    """{controller or "": path} from /proc/PID/cgroup ("" is the v2 line)."""
    out = {}
    for line in _read("/proc/%s/cgroup" % pid).splitlines():
        hid, ctrls, path = line.split(":", 2)
        if hid == "0" and ctrls == "":
            out[""] = path
        for c in ctrls.split(","):
            if c:
                out[c] = path
    return out


def _on_disk(mnt, mroot, path):
    """The directory of cgroup `path` (as /proc/self/cgroup names it) in a
    mount whose root inside the hierarchy is mroot; None if outside it."""
    if mroot != "/" and not (path == mroot or path.startswith(mroot.rstrip("/") + "/")):
        return None
    rel = path[len(mroot.rstrip("/")):] if mroot != "/" else path
    return os.path.normpath(os.path.join(mnt, rel.lstrip("/")))


def _rel(mnt, mroot, d):
    """The inverse of _on_disk: a cgroup directory's path in its hierarchy."""
    return "/" + "/".join(x for x in (mroot.strip("/"), d[len(mnt):].strip("/")) if x)


def version():
    """1 or 2: the hierarchy the memory controller is in; None when neither
    has it (then create() raises and says why)."""
    for mnt, _, fstype, opts in _mounts():
        if fstype == "cgroup" and "memory" in opts:
            return 1
    for mnt, _, fstype, _ in _mounts():
        if fstype == "cgroup2":
            try:
                if "memory" in _read(os.path.join(mnt, "cgroup.controllers")).split():
                    return 2
            except OSError:
                pass
    return None


def _ancestors(d, top):
    """d, its parent, ... up to and including top."""
    out = [d]
    while d != top and d.startswith(top + "/"):
        d = os.path.dirname(d)
        out.append(d)
    return out


def _mkchild(candidates, name, refusal=lambda parent: None):
    """mkdir name in the first candidate parent that refusal(parent) does
    not refuse (it returns why, or None) and where mkdir is allowed.
    Returns the new directory; TightError naming every refusal."""
    why = []
    for parent in candidates:
        r = refusal(parent)
        if r:
            why.append("%s: %s" % (parent, r))
            continue
        d = os.path.join(parent, name)
        try:
            os.mkdir(d)
            return d
        except OSError as e:
            why.append("%s: %s" % (parent, e.strerror))
    raise TightError("cannot make a cgroup %s (%s)" % (name, "; ".join(why)))


# --------------------------------------------------------------------------
# The cgroup


class Cgroup:
    """One memory cgroup (and on v1 its cpuacct twin) holding a process tree.
    .version 1 or 2, .mem and .cpu the directories (the same on v2 or when
    cpuacct is co-mounted), .limit the limit in bytes, .where how it was
    placed (for a report's header)."""

    def __init__(self, ver, mem, cpu, limit, where, rel):
        self.version, self.mem, self.cpu, self.limit, self.where = ver, mem, cpu, limit, where
        self.rel = rel  # its path as /proc/PID/cgroup names it
        self.dirs = [mem] if cpu in (None, mem) else [mem, cpu]
        self.removed = False
        self.psi0 = _psi("/proc/pressure/memory") if ver == 1 else None

    def __repr__(self):
        return "cgroup v%d %s (%s)" % (self.version, self.mem, benchlib.fmt_size(self.limit))

    # -- joining
    def join(self, pid=0):
        """Move pid (0: the caller) into the cgroup; its later children inherit it."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), "%d\n" % pid)

    def preexec(self):
        """Popen(preexec_fn=cg.preexec): the child joins before it execs."""
        self.join(0)

    def prefix(self):
        """An argv prefix for a command whose Popen is not ours to give a
        preexec_fn: a shell joins the cgroup, then execs the command (same pid)."""
        join = " && ".join('echo $$ > "%s"' % os.path.join(d, "cgroup.procs")
                           for d in self.dirs)
        return ["sh", "-c", join + ' && exec "$@"', "sh"]

    def holds(self, pid):
        """Whether pid is in the (memory) cgroup; None when pid is gone."""
        try:
            return _own(pid).get("memory" if self.version == 1 else "") == self.rel
        except (OSError, ValueError):
            return None

    def pids(self):
        out = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in _read(os.path.join(d, "cgroup.procs")).split())
            except OSError:
                pass
        return sorted(out)

    # -- readings
    def working_set(self):
        """Memory in use now less the inactive page cache (what the kernel
        could drop without a refault: kubelet's "working set"), bytes. The
        peak of usage() is the limit as soon as the page cache fills it;
        sample this for what the job really holds."""
        if self.version == 1:
            cur = int(_read(os.path.join(self.mem, "memory.usage_in_bytes")))
            key = "total_inactive_file"
        else:
            cur = int(_read(os.path.join(self.mem, "memory.current")))
            key = "inactive_file"
        return max(0, cur - _kv(os.path.join(self.mem, "memory.stat")).get(key, 0))

    def watch(self, interval=0.25):
        """A thread sampling working_set() every interval; its stop()
        returns the peak seen (bytes)."""
        return _Watch(self, interval)

    def usage(self):
        """What the cgroup used since it was made: peak memory and current
        usage (bytes), OOM kills, whether it is under OOM now, CPU seconds
        (user, sys) of every process that ran in it."""
        m, out = self.mem, {"limit": self.limit}
        if self.version == 1:
            out["peak"] = int(_read(os.path.join(m, "memory.max_usage_in_bytes")))
            out["current"] = int(_read(os.path.join(m, "memory.usage_in_bytes")))
            oc = _kv(os.path.join(m, "memory.oom_control"))
            out["oom_kills"] = oc.get("oom_kill", 0)
            out["under_oom"] = oc.get("under_oom", 0)
            c = self.cpu
            try:
                user = int(_read(os.path.join(c, "cpuacct.usage_user"))) / 1e9
                sys_ = int(_read(os.path.join(c, "cpuacct.usage_sys"))) / 1e9
            except OSError:  # older kernels: only cpuacct.stat, in clock ticks
                st, hz = _kv(os.path.join(c, "cpuacct.stat")), os.sysconf("SC_CLK_TCK")
                user, sys_ = st.get("user", 0) / hz, st.get("system", 0) / hz
        else:
            out["peak"] = int(_read(os.path.join(m, "memory.peak")))
            out["current"] = int(_read(os.path.join(m, "memory.current")))
            ev = _kv(os.path.join(m, "memory.events"))
            out["oom_kills"] = ev.get("oom_kill", 0)
            out["under_oom"] = 0  # v2 has no such state: an OOM kills or the task waits
            st = _kv(os.path.join(m, "cpu.stat"))
            user, sys_ = st.get("user_usec", 0) / 1e6, st.get("system_usec", 0) / 1e6
        out["user_s"], out["sys_s"] = user, sys_
        # reclaim's traces: refaults (pages reclaimed, then needed again),
        # major faults, and v2's own scan/steal counts; time stalled on memory
        # (PSI "some"/"full": v2 the cgroup's own, v1 the machine's since made)
        st = _kv(os.path.join(m, "memory.stat"))
        pre = "total_" if self.version == 1 else ""
        out["stat"] = {k: st[pre + k] for k in ("pgmajfault", "workingset_refault_file",
                                                 "pgscan", "pgsteal") if pre + k in st}
        if self.version == 2:
            out["stall_some_s"], out["stall_full_s"] = _psi(os.path.join(m, "memory.pressure"))
            out["stall_scope"] = "cgroup"
        else:
            now = _psi("/proc/pressure/memory")
            out["stall_some_s"], out["stall_full_s"] = (
                (now[0] - self.psi0[0], now[1] - self.psi0[1]) if now[0] is not None
                and self.psi0[0] is not None else (None, None))
            out["stall_scope"] = "machine"
        return out

    # -- the end
    def kill(self, spare=(), wait=KILL_WAIT):
        """SIGKILL every process in the cgroup but those in spare until none
        is left (bounded); returns the pids still there."""
        kill_file = os.path.join(self.mem, "cgroup.kill")
        end = time.monotonic() + wait
        while True:
            pids = [p for p in self.pids() if p not in spare]
            if not pids or time.monotonic() > end:
                return pids
            if self.version == 2 and not spare and os.path.exists(kill_file):
                try:
                    _write(kill_file, "1\n")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self):
        """Kill what is left, then rmdir (retried while the kernel lets go of
        the last tasks). True when the directories are gone."""
        if self.removed:
            return True
        left = self.kill()
        if left:
            benchlib.log("%r: pids %s survived SIGKILL (stuck in a FUSE request?)" % (self, left))
        ok = True
        for d in self.dirs:
            end = time.monotonic() + KILL_WAIT
            while os.path.isdir(d):
                try:
                    os.rmdir(d)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        break
                    if time.monotonic() > end:
                        benchlib.log("cannot remove cgroup %s: %s" % (d, e.strerror))
                        ok = False
                        break
                    time.sleep(0.05)
        self.removed = ok
        return ok


class _Watch:
    def __init__(self, cg, interval):
        self.cg, self.interval, self.peak = cg, interval, 0
        self.ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _sample(self):
        try:
            self.peak = max(self.peak, self.cg.working_set())
        except OSError:  # removed under us: the run is over
            pass

    def _run(self):
        while not self.ev.wait(self.interval):
            self._sample()

    def stop(self):
        self.ev.set()
        self.t.join()
        self._sample()
        return self.peak


def create(limit, tag="run", cleanup=benchlib.CLEANUP):
    """A new cgroup limited to `limit` bytes of memory, named
    spw-tight-<tag>-<pid>-<n>, registered with cleanup (a benchlib.Cleanup;
    None: the caller removes it). TightError when no memory controller can
    be used here, or when an ancestor's limit is below `limit`."""
    ver = version()
    create.n += 1
    name = "%s-%s-%d-%d" % (PREFIX, tag, os.getpid(), create.n)
    if ver is None:
        raise TightError("no memory cgroup controller: neither a cgroup v1 'memory' hierarchy"
                         " nor cgroup2 with 'memory' in cgroup.controllers")
    cg = _create_v1(name, limit) if ver == 1 else _create_v2(name, limit)
    if cleanup is not None:
        cleanup.add_cgroup(cg)
    return cg


create.n = 0


def _create_v1(name, limit):
    own = _own()
    mems = [(m, r) for m, r, t, o in _mounts() if t == "cgroup" and "memory" in o]
    accts = [(m, r, o) for m, r, t, o in _mounts() if t == "cgroup" and "cpuacct" in o]
    mmnt, mroot = mems[0]
    start = _on_disk(mmnt, mroot, own.get("memory", "/")) or mmnt
    mem = _mkchild(_ancestors(start, mmnt), name)
    cpu = None
    try:
        parent = os.path.dirname(mem)
        hier = int(_read(os.path.join(parent, "memory.use_hierarchy")))
        _write(os.path.join(mem, "memory.limit_in_bytes"), "%d\n" % limit)
        memsw = os.path.join(mem, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            _write(memsw, "%d\n" % limit)
        eff = _kv(os.path.join(mem, "memory.stat")).get("hierarchical_memory_limit", limit)
        if eff < limit:
            raise TightError("cgroup %s: an ancestor limits it to %d bytes, below the %d asked"
                             % (mem, eff, limit))
        if accts and "memory" not in accts[0][2]:
            amnt, aroot, _ = accts[0]
            astart = _on_disk(amnt, aroot, own.get("cpuacct", "/")) or amnt
            cpu = _mkchild(_ancestors(astart, amnt), name)
        elif not accts:
            raise TightError("cgroup v1 without a cpuacct hierarchy: no CPU seconds")
    except BaseException:
        for d in (cpu, mem):
            if d:
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        raise
    where = "v1 %s (use_hierarchy=%d)%s" % (mem, hier, ", cpuacct %s" % cpu if cpu else "")
    return Cgroup(1, mem, cpu or mem, limit, where, _rel(mmnt, mroot, mem))


def _create_v2(name, limit):
    mnt, root = [(m, r) for m, r, t, _ in _mounts() if t == "cgroup2"][0]
    start = _on_disk(mnt, root, _own().get("", "/")) or mnt

    def memory_refused(parent):
        """None when children of parent get the memory controller (enabled
        here if need be), else why not."""
        try:
            if "memory" in _read(os.path.join(parent, "cgroup.subtree_control")).split():
                return None
            if "memory" not in _read(os.path.join(parent, "cgroup.controllers")).split():
                return "no memory controller delegated to it"
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory\n")
            return None
        except OSError as e:
            if e.errno == errno.EBUSY:
                return ("it holds processes, so it cannot enable memory for children (run"
                        " from a cgroup whose parent delegates memory, e.g. systemd-run"
                        " --scope -p Delegate=yes)")
            return "enabling memory for its children: %s" % e.strerror

    mem = _mkchild(_ancestors(start, mnt), name, memory_refused)
    try:
        _write(os.path.join(mem, "memory.max"), "%d\n" % limit)
        swap = os.path.join(mem, "memory.swap.max")
        if os.path.exists(swap):
            _write(swap, "0\n")
        if not os.path.exists(os.path.join(mem, "memory.peak")):
            raise TightError("cgroup v2 without memory.peak (Linux < 5.19): no peak memory")
        eff, d = limit, os.path.dirname(mem)
        while d.startswith(mnt + "/"):
            try:
                v = _read(os.path.join(d, "memory.max")).strip()
                if v != "max":
                    eff = min(eff, int(v))
            except OSError:
                pass
            d = os.path.dirname(d)
        if eff < limit:
            raise TightError("cgroup %s: an ancestor limits it to %d bytes, below the %d asked"
                             % (mem, eff, limit))
    except BaseException:
        try:
            os.rmdir(mem)
        except OSError:
            pass
        raise
    return Cgroup(2, mem, mem, limit, "v2 %s" % mem, _rel(mnt, root, mem))

