#!/usr/bin/env python3
"""test_passthrough - hot files handed to the kernel (FUSE passthrough).

A file whose data is all in RAM, opened to read, is passed through: the kernel
reads (and maps) its hot file itself. These tests check, on real mounts, the
rules tier/tier.h writes down: the bytes are right with readers and writers
mixed in every order; a passed-through file is never punched under memory
pressure and its evict is EBUSY; mmap, unlink, truncate and rename while
open; kill -9 and a remount; a user mount without CAP_SYS_ADMIN and
passthrough=off fall back and say so; and RAM holds one copy of a hot byte
(memory cgroups: the readers' page cache is gone after their last close).
"""
import ctypes
import errno
import hashlib
import json
import mmap
import os
import random
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402

MiB = 1 << 20
CG_ROOT = "/sys/fs/cgroup/memory"


def pt(mnt):
    return stats_of(mnt)["passthrough"]


def evict(path):
    os.setxattr(path, "user.spillway.evict", b"1")


def pattern(seed, size):
    r = random.Random(seed)
    block = r.randbytes(MiB)
    out = bytearray()
    i = 0
    while len(out) < size:
        out += i.to_bytes(8, "little") + block[8:]
        i += 1
    return bytes(out[:size])


def write_file(path, data, mnt=None):
    """Write path; with mnt, also wait for the daemon to see the close (the
    kernel sends a release after close() returns: an open before it would
    find the writer still there and go through the daemon, as it should)."""
    before = pt(mnt)["cache_drops"] if mnt else 0
    with open(path, "wb") as f:
        f.write(data)
    if mnt:
        harness.wait_until(lambda: pt(mnt)["cache_drops"] > before, 10,
                           "the daemon saw the writer's close")


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


class PassthroughCase(harness.SpwTestCase):
    timeout = 180

    def durable_state(self):
        """A hot_dir that outlives one mount, and the options of a mount
        whose files survive it (a cold dir and a state_dir)."""
        base = self.tmpdir()
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        cold, sdir = os.path.join(base, "cold"), os.path.join(base, "state")
        os.mkdir(cold)
        return hot, ["nvme=" + cold, "state_dir=" + sdir, "mem_pressure=off"]

    def cold_mount(self, hot_size="256M", opts=(), **kw):
        cold = self.tmpdir()
        return self.mount(hot_size=hot_size, opts=["nvme=" + cold, "mem_pressure=off"] + list(opts),
                          **kw)


class TestReads(PassthroughCase):

    def test_hot_file_read_is_passed_through(self):
        m = self.cold_mount()
        self.assertEqual(pt(m.mnt)["on"], 1, m.log_text(20))
        self.assertIn("passthrough on", m.log_text(40))
        data = pattern(1, 5 * MiB + 123)
        write_file(m.path("a"), data, m.mnt)
        before = pt(m.mnt)
        fd = os.open(m.path("a"), os.O_RDONLY)
        try:
            now = pt(m.mnt)
            self.assertEqual(now["open"], 1)
            self.assertEqual(now["opens"], before["opens"] + 1)
            self.assertEqual(os.pread(fd, len(data) + 10, 0), data)
            self.assertEqual(os.pread(fd, 100, 3 * MiB + 7), data[3 * MiB + 7:3 * MiB + 107])
            # random 4 KiB reads
            r = random.Random(5)
            for _ in range(200):
                off = r.randrange(0, len(data))
                self.assertEqual(os.pread(fd, 4096, off), data[off:off + 4096])
        finally:
            os.close(fd)
        self.assertEqual(pt(m.mnt)["open"], 0)

    def test_cold_file_goes_through_the_daemon_then_passes_through(self):
        m = self.cold_mount()
        data = pattern(2, 9 * MiB)
        write_file(m.path("c"), data, m.mnt)
        evict(m.path("c"))
        self.assertGreater(file_state(m.path("c"))["cold"], 0)
        before = pt(m.mnt)
        self.assertEqual(read_file(m.path("c")), data)
        self.assertEqual(pt(m.mnt)["fallback"]["cold"], before["fallback"]["cold"] + 1)
        # read once it stays cold (admission: the kernel's pages are its
        # only copy); read again once the kernel let them go, it comes
        # back into RAM, and the next open is passed through
        self.assertEqual(file_state(m.path("c"))["hot"], 0,
                         "read once, yet in RAM: %s\n%s" % (file_state(m.path("c")),
                                                             m.log_text(30)))
        with open(m.path("c"), "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            self.assertEqual(f.read(), data)
        harness.wait_until(lambda: file_state(m.path("c"))["cold"] == 0
                           and file_state(m.path("c"))["restoring"] == 0, 30, "restored")
        opens = pt(m.mnt)["opens"]
        self.assertEqual(read_file(m.path("c")), data)
        self.assertEqual(pt(m.mnt)["opens"], opens + 1)

    def test_mmap_shared_and_private(self):
        m = self.cold_mount()
        data = pattern(3, 3 * MiB + 5)
        write_file(m.path("m"), data, m.mnt)
        with open(m.path("m"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                self.assertEqual(pt(m.mnt)["open"], 1)
                self.assertEqual(mm[:], data)
            with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                mm[0:5] = b"XXXXX"  # copy on write: the file keeps its bytes
                self.assertEqual(mm[0:5], b"XXXXX")
        self.assertEqual(read_file(m.path("m")), data)
        # a shared writable mapping beside a passed-through reader
        fr = os.open(m.path("m"), os.O_RDONLY)
        try:
            with open(m.path("m"), "r+b") as f:
                with mmap.mmap(f.fileno(), 0) as mm:
                    mm[MiB:MiB + 4] = b"abcd"
                    mm.flush()
                    self.assertEqual(os.pread(fr, 4, MiB), b"abcd")
        finally:
            os.close(fr)
        want = data[:MiB] + b"abcd" + data[MiB + 4:]
        self.assertEqual(read_file(m.path("m")), want)
        # what the mapping wrote is dirty: spilled by evict, read back cold
        self.assertGreater(file_state(m.path("m"))["dirty"], 0)
        evict(m.path("m"))
        self.assertGreater(file_state(m.path("m"))["cold"], 0)
        self.assertEqual(read_file(m.path("m")), want)

    def test_unlink_truncate_rename_while_open(self):
        m = self.cold_mount()
        data = pattern(4, 6 * MiB)
        write_file(m.path("u"), data, m.mnt)
        fd = os.open(m.path("u"), os.O_RDONLY)
        try:
            self.assertEqual(pt(m.mnt)["open"], 1)
            os.rename(m.path("u"), m.path("v"))
            self.assertEqual(os.pread(fd, 4096, 5 * MiB), data[5 * MiB:5 * MiB + 4096])
            os.truncate(m.path("v"), 2 * MiB + 1)
            self.assertEqual(os.fstat(fd).st_size, 2 * MiB + 1)
            self.assertEqual(os.pread(fd, 4 * MiB, 0), data[:2 * MiB + 1])
            os.unlink(m.path("v"))
            self.assertFalse(os.path.exists(m.path("v")))
            self.assertEqual(os.pread(fd, 10, 2 * MiB - 5), data[2 * MiB - 5:2 * MiB + 1])
        finally:
            os.close(fd)
        self.assertEqual(pt(m.mnt)["open"], 0)
        harness.wait_until(lambda: m.hot_files() == [], 10, "the unlinked file's hot file gone")


class TestWritersAndReaders(PassthroughCase):
    """Every order of readers and writers on one file reads as on tmpfs."""

    def exercise(self, m, order, seed):
        r = random.Random(seed)
        path = m.path("f%d" % seed)
        model = bytearray(pattern(seed, 2 * MiB + 333))
        write_file(path, bytes(model), m.mnt)
        fds = {}

        def open_(kind):
            fds[kind] = os.open(path, os.O_RDONLY if kind == "r" else os.O_RDWR)

        for kind in order:
            open_(kind)
        ops = 0
        for i in range(300):
            op = r.random()
            if op < 0.45 and "w" in fds:
                off = r.randrange(0, len(model) + MiB)
                ln = r.randrange(1, 256 * 1024)
                buf = r.randbytes(ln)
                self.assertEqual(os.pwrite(fds["w"], buf, off), ln)
                if off > len(model):
                    model += bytes(off - len(model))
                model[off:off + ln] = buf
            elif op < 0.5 and "w" in fds:
                size = r.randrange(0, len(model) + MiB)
                os.ftruncate(fds["w"], size)
                model = model[:size] + bytes(max(0, size - len(model)))
            else:
                reader = fds.get("r", fds.get("w"))
                off = r.randrange(0, len(model) + 4096)
                ln = r.randrange(1, 512 * 1024)
                got = os.pread(reader, ln, off)
                self.assertEqual(got, bytes(model[off:off + ln]),
                                 "op %d: read %d@%d (order %s)" % (i, ln, off, order))
                self.assertEqual(os.stat(path).st_size, len(model), "op %d" % i)
            ops += 1
            if i == 150:
                # the first opener closes, another reader comes (the other
                # reader, if any, stays open under its own key)
                first = order[0]
                os.close(fds.pop(first))
                if "r" in fds:
                    fds["r0"] = fds.pop("r")
                open_("r")
        for fd in fds.values():
            os.close(fd)
        self.assertEqual(read_file(path), bytes(model))
        self.assertEqual(os.stat(path).st_size, len(model))
        # nothing written was lost track of: spilled, dropped, read back
        evict(path)
        st = file_state(path)
        self.assertEqual(st["dirty"], 0, st)
        self.assertEqual(read_file(path), bytes(model))
        return ops

    def test_reader_first_then_writer(self):
        m = self.cold_mount()
        self.exercise(m, "rw", 11)
        self.assertGreaterEqual(pt(m.mnt)["opens"], 2)  # the writer joined

    def test_writer_first_then_reader(self):
        m = self.cold_mount()
        before = pt(m.mnt)["fallback"]["shared"]
        self.exercise(m, "wr", 12)
        self.assertGreater(pt(m.mnt)["fallback"]["shared"], before)

    def test_writer_alone_through_the_daemon(self):
        m = self.cold_mount()
        self.exercise(m, "w", 13)
        self.assertGreater(pt(m.mnt)["fallback"]["write"], 0)

    def test_kill9_with_passthrough_writer_and_remount(self):
        hot, opts = self.durable_state()
        m = harness.Mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-kill")
        m.start()
        try:
            data = bytearray(pattern(21, 4 * MiB))
            write_file(m.path("k"), bytes(data), m.mnt)
            fr = os.open(m.path("k"), os.O_RDONLY)
            fw = os.open(m.path("k"), os.O_RDWR)
            self.assertEqual(pt(m.mnt)["open"], 2)
            os.pwrite(fw, b"Z" * 5000, 3 * MiB)
            os.pwrite(fw, b"tail", 4 * MiB)
            os.fsync(fw)
            data[3 * MiB:3 * MiB + 5000] = b"Z" * 5000
            data += b"tail"
            os.close(fw)
            os.close(fr)
            m.abort()  # kill -9
        finally:
            m.stop()
        m2 = self.mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-kill2")
        self.assertEqual(read_file(m2.path("k")), bytes(data))

    def test_unmount_with_opens_held(self):
        """A busy mount refuses a plain unmount (as tmpfs does); a lazy one
        detaches it, the passed-through reader goes on reading, and when it
        closes the daemon spills everything and exits; a remount reads it."""
        hot, opts = self.durable_state()
        m = harness.Mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-umount")
        self.addCleanup(m.stop)
        m.start()
        data = pattern(22, 3 * MiB + 1)
        write_file(m.path("u"), data, m.mnt)
        fd = os.open(m.path("u"), os.O_RDONLY)
        try:
            self.assertEqual(pt(m.mnt)["open"], 1)
            r = subprocess.run(["fusermount3", "-u", m.mnt], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, "a busy mount was unmounted")
            self.assertIn("busy", r.stderr.lower())
            self.assertEqual(os.pread(fd, 4096, MiB), data[MiB:MiB + 4096])
            subprocess.run(["umount", "-l", m.mnt], check=True)
            self.assertFalse(harness.is_mounted(m.mnt))
            self.assertEqual(os.pread(fd, len(data), 0), data)
        finally:
            os.close(fd)
        m.proc.wait(timeout=60)
        m.killed_by_watchdog = True  # the exit status is checked here
        self.assertEqual(m.proc.returncode, 0, m.log_text(30))
        m.stop()
        m2 = self.mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-umount2")
        self.assertEqual(read_file(m2.path("u")), data)

    def test_sigterm_with_opens_held(self):
        """SIGTERM unmounts as umount does, passed-through opens or not: every
        byte spilled, nothing left in RAM, a remount reads it."""
        hot, opts = self.durable_state()
        m = harness.Mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-term")
        self.addCleanup(m.stop)
        m.start()
        data = pattern(23, 5 * MiB + 3)
        write_file(m.path("t"), data, m.mnt)
        fd = os.open(m.path("t"), os.O_RDONLY)
        try:
            self.assertEqual(pt(m.mnt)["open"], 1)
            os.kill(m.pid, signal.SIGTERM)
            m.proc.wait(timeout=60)
        finally:
            try:
                os.close(fd)  # its flush finds no daemon: ENOTCONN
            except OSError:
                pass
        m.killed_by_watchdog = True  # the exit status is checked here
        self.assertEqual(m.proc.returncode, 0, m.log_text(30))
        harness.wait_until(lambda: not harness.is_mounted(m.mnt), 10, "mount gone")
        m.stop()
        left = os.listdir(hot) if os.path.isdir(hot) else []  # a made hot_dir goes too
        self.assertEqual([n for n in left if n not in harness.DAEMON_FILES], [],
                         "hot files left in RAM")
        m2 = self.mount(hot_size="256M", opts=opts, hot_dir=hot, tag="pt-term2")
        self.assertEqual(read_file(m2.path("t")), data)


class TestPressure(PassthroughCase):
    timeout = 300

    def test_never_punched_under_pressure(self):
        # extents=off: the other files' chunks must go through RAM into
        # segments around the held one (extents would take them off RAM)
        m = self.cold_mount(hot_size="48M", opts=["write_wait=30s", "min_spill_size=8M",
                                                  "extents=off"])
        held = pattern(31, 16 * MiB)
        write_file(m.path("held"), held, m.mnt)
        f = open(m.path("held"), "rb")
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            self.assertEqual(pt(m.mnt)["open"], 1)
            with self.assertRaises(OSError) as cm:
                evict(m.path("held"))
            self.assertEqual(cm.exception.errno, errno.EBUSY)
            others = {}
            for i in range(12):  # 96 MiB through a 48 MiB tier
                d = pattern(40 + i, 8 * MiB)
                write_file(m.path("o%d" % i), d, m.mnt)
                others["o%d" % i] = hashlib.sha256(d).hexdigest()
                # every page of the held file is still its bytes, never zeros
                self.assertEqual(mm[:], held)
            st = stats_of(m.mnt)
            self.assertEqual(st["enospc"], 0)
            self.assertEqual(file_state(m.path("held"))["cold"], 0)
            self.assertGreater(file_state(m.path("o0"))["cold"], 0)
        finally:
            mm.close()
            f.close()
        for name, h in others.items():
            self.assertEqual(hashlib.sha256(read_file(m.path(name))).hexdigest(), h, name)
        evict(m.path("held"))  # closed: evictable again
        self.assertGreater(file_state(m.path("held"))["cold"], 0)
        self.assertEqual(read_file(m.path("held")), held)


class TestFallbacks(PassthroughCase):

    def test_passthrough_off(self):
        m = self.cold_mount(opts=["passthrough=off"])
        harness.wait_until(lambda: "passthrough off (passthrough=off)" in m.log_text(40), 10,
                           "the mount says passthrough is off")
        data = pattern(50, 3 * MiB)
        write_file(m.path("a"), data)
        self.assertEqual(read_file(m.path("a")), data)
        p = pt(m.mnt)
        self.assertEqual((p["on"], p["opens"], p["open"]), (0, 0, 0))

    def test_user_mount_without_cap_sys_admin(self):
        uid = 65534  # nobody
        # user mounts need /dev/fuse open to all (its mode everywhere but in
        # some sandboxes): as on such a system, for this test
        mode = os.stat("/dev/fuse").st_mode & 0o777
        if mode != 0o666:
            os.chmod("/dev/fuse", 0o666)
            self.addCleanup(os.chmod, "/dev/fuse", mode)
        top = self.tmpdir()
        shm = self.tmpdir(on_shm=True)
        for d in (top, shm):
            os.chown(d, uid, uid)
        cold = os.path.join(top, "cold")
        os.mkdir(cold)
        os.chown(cold, uid, uid)
        m = harness.Mount(hot_size="64M", opts=["nvme=" + cold], hot_dir=os.path.join(shm, "hot"),
                          tag="pt-user", prefix=["setpriv", "--reuid=%d" % uid,
                                                 "--regid=%d" % uid, "--clear-groups",
                                                 "--inh-caps=-all"])
        os.chown(m.mnt, uid, uid)
        os.chown(m.base, uid, uid)
        self.addCleanup(m.stop)
        m.start()
        harness.wait_until(lambda: "passthrough off (the daemon lacks CAP_SYS_ADMIN"
                           in m.log_text(40), 10, "the mount says why passthrough is off")
        # only the mounting user may use a user mount (no allow_other)
        script = (
            "import json,os,random,sys\n"
            "p=sys.argv[1]\n"
            "d=random.Random(51).randbytes(2*1024*1024+9)\n"
            "open(p+'/a','wb').write(d)\n"
            "assert open(p+'/a','rb').read()==d\n"
            "s=json.loads(os.getxattr(p,'user.spillway.stats'))['passthrough']\n"
            "print(json.dumps(s))\n")
        out = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                              "--clear-groups", sys.executable, "-c", script, m.mnt],
                             check=True, stdout=subprocess.PIPE, timeout=60).stdout
        p = json.loads(out)
        self.assertEqual((p["on"], p["opens"]), (0, 0))


def cgroup(name):
    cg = os.path.join(CG_ROOT, "spw-pt-%s-%d" % (name, os.getpid()))
    os.mkdir(cg)
    return cg


def cg_stat(cg):
    with open(os.path.join(cg, "memory.stat")) as f:
        return {k: int(v) for k, v in (ln.split() for ln in f)}


def rm_cgroup(cg):
    try:
        with open(os.path.join(cg, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            with open(os.path.join(CG_ROOT, "cgroup.procs"), "w") as f:
                f.write(pid + "\n")
    except OSError:
        pass

    def gone():
        try:
            os.rmdir(cg)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False
    harness.wait_until(gone, 10, "cgroup %s removed" % cg)


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached_pages(path, size):
    """How many of path's first size bytes' pages the kernel's page cache of
    the FUSE file holds (mincore of a shared mapping: nothing is faulted)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
            if LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(b & 1 for b in vec)
        finally:
            LIBC.munmap(addr, size)
    finally:
        os.close(fd)


class TestPageDropsWaitForTheLastClose(PassthroughCase):
    """The kernel drops a page only with the page's lock held, and a read in
    flight holds it until the daemon answers: a drop sent for an open file
    can wait on a read, and if the daemon is killed meanwhile the drop never
    ends (D state, /dev/fuse held, the mount hung). So the evictor's drops
    for an open file are held back (the cached pages are still right: every
    change goes through the daemon) and its last close drops the file."""

    def test_evict_of_an_open_file_drops_its_pages_at_the_last_close(self):
        m = self.cold_mount(opts=["passthrough=off"])
        size = 4 * MiB
        data = pattern(41, size)
        path = m.path("open")
        write_file(path, data)
        npages = size // mmap.PAGESIZE
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, size, 0), data)
            self.assertEqual(cached_pages(path, size), npages)
            before = stats_of(m.mnt)["page_cache"]
            evict(path)
            self.assertEqual(file_state(path)["hot"], 0)
            harness.wait_until(
                lambda: stats_of(m.mnt)["page_cache"]["drops_owed"] > before["drops_owed"],
                10, "the evictor's drop held back while the file is open")
            self.assertEqual(stats_of(m.mnt)["page_cache"]["drops_sent"], before["drops_sent"])
            self.assertEqual(cached_pages(path, size), npages)
            self.assertEqual(os.pread(fd, size, 0), data)  # the kept pages are right
        finally:
            os.close(fd)
        harness.wait_until(lambda: cached_pages(path, size) == 0, 10,
                           "the last close dropped the file's pages")
        self.assertGreater(stats_of(m.mnt)["page_cache"]["drops_sent"], before["drops_sent"])
        self.assertEqual(read_file(path), data)

    def test_evict_of_a_closed_file_drops_its_pages_at_once(self):
        m = self.cold_mount(opts=["passthrough=off"])
        size = 2 * MiB
        data = pattern(42, size)
        path = m.path("closed")
        write_file(path, data)
        self.assertEqual(read_file(path), data)
        self.assertEqual(cached_pages(path, size), size // mmap.PAGESIZE)
        before = stats_of(m.mnt)["page_cache"]
        evict(path)
        # (polled on the stats: a look at the pages opens the file)
        harness.wait_until(
                lambda: stats_of(m.mnt)["page_cache"]["drops_sent"] > before["drops_sent"],
                10, "the evictor's drop sent")
        self.assertEqual(stats_of(m.mnt)["page_cache"]["drops_owed"], before["drops_owed"])
        self.assertEqual(cached_pages(path, size), 0)
        self.assertEqual(read_file(path), data)


class TestOneCopyInRam(PassthroughCase):
    """512 MiB written and read back through the mount: the daemon's cgroup
    holds it as Shmem (the hot tier), the writer's and reader's cgroup keeps
    at most 5% of it as page cache once the files are closed."""

    timeout = 300

    def test_hot_bytes_held_once(self):
        if not os.path.exists(os.path.join(CG_ROOT, "memory.stat")):
            self.fail("no cgroup v1 memory controller at %s" % CG_ROOT)
        dcg, ccg = cgroup("daemon"), cgroup("client")
        self.addCleanup(rm_cgroup, dcg)
        self.addCleanup(rm_cgroup, ccg)
        enter = ["sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % dcg, "sh"]
        m = self.mount(hot_size="1G", prefix=enter, opts=["mem_pressure=off"])
        size = 512 * MiB
        path = m.path("big")
        script = (
            "import hashlib,sys\n"
            "p,n=sys.argv[1],int(sys.argv[2])\n"
            "blk=bytes(range(256))*4096\n"
            "h=hashlib.sha256()\n"
            "with open(p,'wb') as f:\n"
            "    for i in range(n//len(blk)):\n"
            "        b=i.to_bytes(8,'little')+blk[8:]; f.write(b); h.update(b)\n"
            "g=hashlib.sha256()\n"
            "with open(p,'rb') as f:\n"
            "    for b in iter(lambda: f.read(1<<20), b''): g.update(b)\n"
            "with open(p,'rb') as f:\n"
            "    for b in iter(lambda: f.read(1<<20), b''): pass\n"
            "assert h.digest()==g.digest()\n")
        subprocess.run(["sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % ccg, "sh",
                        sys.executable, "-c", script, path, str(size)], check=True, timeout=240)
        d = cg_stat(dcg)
        self.assertGreaterEqual(d["shmem"], size * 0.98, d)
        # the client's copy (the kernel's FUSE page cache of the written
        # file) goes at its last close
        harness.wait_until(lambda: cg_stat(ccg)["cache"] <= size * 0.05, 15,
                           "client page cache <= 5%% of the file (%s)" % cg_stat(ccg))
        p = pt(m.mnt)
        self.assertGreaterEqual(p["opens"], 2)  # both reads were passed through
        sys.stderr.write("[512 MiB: daemon shmem %d MiB, client cache %d MiB] " % (
            cg_stat(dcg)["shmem"] >> 20, cg_stat(ccg)["cache"] >> 20))


if __name__ == "__main__":
    harness.main()
