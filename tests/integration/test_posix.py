#!/usr/bin/env python3
"""
test_posix - every FUSE operation on a spillway mount behaves as on tmpfs.

Most tests run the same scenario on a native tmpfs directory and on the mount
and compare each step's result and errno (harness.Recorder); the rest assert
spillway-specific promises (hot_dir layout, open-file lifetimes, mmap).
Run: python3 test_posix.py --build BUILD_DIR [-k pattern]
"""

import ctypes
import errno
import hashlib
import mmap
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import MountedTestCase  # noqa: E402

MiB = 1 << 20
DAEMON_FILES = harness.DAEMON_FILES


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + MiB])
    finally:
        os.close(fd)


def append_file(path, data):
    with open(path, "ab") as f:
        return f.write(data)


def fd_read_all(fd):
    out = []
    off = 0
    while True:
        b = os.pread(fd, MiB, off)
        if not b:
            return b"".join(out)
        out.append(b)
        off += len(b)


def sha(data):
    return hashlib.sha256(data).hexdigest()[:16]


def pattern(n, seed=0):
    """Deterministic non-repeating-ish bytes (cheap)."""
    block = hashlib.sha256(b"spw%d" % seed).digest() * 2048  # 64 KiB
    return (block * (n // len(block) + 1))[:n]


def wait_clock_advance(ns=20_000_000):
    """Busy-wait until the wall clock moved ns forward (timestamp resolution,
    not synchronisation with anything)."""
    t0 = time.time_ns()
    while time.time_ns() < t0 + ns:
        pass


# ---------------------------------------------------------------------------


class TestLookupStat(MountedTestCase):
    def test_stat_parity(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"0123456789")
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.stat("f")
            t.stat("d")
            t.stat("missing")
            t.stat("f/x")
            t.stat("d/missing")
            t.stat("x" * 255)
            t.stat("x" * 256)
            t.do("exists d/../f", os.path.exists, t.p("d/../f"))

        self.assertParity(sc)

    def test_inode_numbers_stable_and_distinct(self):
        write_file(self.m.path("a"), b"a")
        write_file(self.m.path("b"), b"b")
        a1 = os.stat(self.m.path("a")).st_ino
        b1 = os.stat(self.m.path("b")).st_ino
        self.assertNotEqual(a1, b1)
        with open(self.m.path("a"), "rb") as f:
            self.assertEqual(os.fstat(f.fileno()).st_ino, a1)
        self.assertEqual(os.stat(self.m.path("a")).st_ino, a1)
        self.assertTrue(stat.S_ISDIR(os.stat(self.mnt).st_mode))


class TestSetattr(MountedTestCase):
    def test_chmod(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"x")
            t.do("mkdir d", os.mkdir, t.p("d"))
            for mode in (0o600, 0o4755, 0o2711, 0o000, 0o777):
                t.do("chmod f %o" % mode, os.chmod, t.p("f"), mode)
                t.stat("f")
            t.do("chmod d 1777", os.chmod, t.p("d"), 0o1777)
            t.stat("d")
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.do("chmod via symlink", os.chmod, t.p("l"), 0o640)
            t.stat("f")
            t.stat("l")
            t.do("chmod missing", os.chmod, t.p("missing"), 0o600)
            fd = t.open("f", os.O_RDONLY)
            t.do("fchmod", os.fchmod, fd, 0o604)
            t.do("fstat", os.fstat, fd)
            t.close(fd)

        self.assertParity(sc)

    def test_chown(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"x")
            t.do("chown f", os.chown, t.p("f"), 1234, 5678)
            t.stat("f")
            t.do("chown uid only", os.chown, t.p("f"), 4321, -1)
            t.stat("f")
            t.do("chown gid only", os.chown, t.p("f"), -1, 8765)
            t.stat("f")
            t.do("chmod setuid", os.chmod, t.p("f"), 0o6755)
            t.do("chown clears setuid", os.chown, t.p("f"), 1, 1)
            t.stat("f")
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.do("lchown", os.chown, t.p("l"), 42, 43, follow_symlinks=False)
            t.stat("l")
            t.stat("f")
            t.do("chown missing", os.chown, t.p("missing"), 1, 1)

        self.assertParity(sc)

    def test_truncate(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"abcdefghij")
            t.do("truncate 4", os.truncate, t.p("f"), 4)
            t.do("read", read_all, t.p("f"))
            t.do("truncate 12", os.truncate, t.p("f"), 12)
            t.do("read", read_all, t.p("f"))
            t.do("truncate 0", os.truncate, t.p("f"), 0)
            t.stat("f")
            t.do("truncate 5M", os.truncate, t.p("f"), 5 * MiB + 3)
            t.do("read 5M", lambda: sha(read_all(t.p("f"))))
            t.do("truncate -1", os.truncate, t.p("f"), -1)
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("truncate dir", os.truncate, t.p("d"), 0)
            t.do("truncate missing", os.truncate, t.p("missing"), 0)

        self.assertParity(sc)

    def test_utimes(self):
        def times(p):
            st = os.stat(p, follow_symlinks=False)
            return (st.st_atime_ns, st.st_mtime_ns)

        def sc(t):
            t.call("create f", write_file, t.p("f"), b"x")
            t.do("utime ns", os.utime, t.p("f"), ns=(1_000_000_123, 2_000_000_456))
            t.do("times", times, t.p("f"))
            t.do("utime old", os.utime, t.p("f"), (86400, 172800))
            t.do("times", times, t.p("f"))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("utime dir", os.utime, t.p("d"), ns=(5, 7))
            t.do("times d", times, t.p("d"))
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.do("lutime", os.utime, t.p("l"), ns=(11, 13), follow_symlinks=False)
            t.do("times l", times, t.p("l"))
            t.do("times f", times, t.p("f"))
            t.do("utime missing", os.utime, t.p("missing"), ns=(1, 1))

        self.assertParity(sc)

    def test_utime_now(self):
        p = self.m.path("f")
        write_file(p, b"x")
        os.utime(p, ns=(1, 1))
        before = time.time_ns()
        os.utime(p)
        after = time.time_ns()
        st = os.stat(p)
        for v in (st.st_atime_ns, st.st_mtime_ns):
            self.assertGreaterEqual(v, before - 50_000_000)
            self.assertLessEqual(v, after + 50_000_000)


class TestDirectories(MountedTestCase):
    def test_mkdir(self):
        def sc(t):
            t.do("mkdir a", os.mkdir, t.p("a"))
            t.stat("a")
            t.do("mkdir a again", os.mkdir, t.p("a"))
            t.do("mkdir a/b 0700", os.mkdir, t.p("a/b"), 0o700)
            t.do("mkdir a/c 0777", os.mkdir, t.p("a/c"), 0o777)
            t.stat("a")
            t.stat("a/b")
            t.stat("a/c")
            t.do("mkdir missing/x", os.mkdir, t.p("missing/x"))
            t.call("create f", write_file, t.p("f"), b"")
            t.do("mkdir f/x", os.mkdir, t.p("f/x"))
            t.do("mkdir over file", os.mkdir, t.p("f"))
            t.do("mkdir long", os.mkdir, t.p("y" * 256))
            t.do("chmod 2775", os.chmod, t.p("a"), 0o2775)
            t.do("chown", os.chown, t.p("a"), 10, 20)
            t.do("mkdir inherits sgid", os.mkdir, t.p("a/s"))
            t.stat("a/s")
            t.do("list", lambda: sorted(os.listdir(t.p("a"))))

        self.assertParity(sc)

    def test_rmdir(self):
        def sc(t):
            t.do("mkdir a", os.mkdir, t.p("a"))
            t.do("mkdir a/b", os.mkdir, t.p("a/b"))
            t.call("create a/b/f", write_file, t.p("a/b/f"), b"x")
            t.do("rmdir non-empty", os.rmdir, t.p("a/b"))
            t.do("rmdir file", os.rmdir, t.p("a/b/f"))
            t.do("rmdir missing", os.rmdir, t.p("a/zz"))
            t.do("rmdir dot", os.rmdir, t.p("a/b/."))
            t.do("unlink dir", os.unlink, t.p("a/b"))
            t.do("unlink f", os.unlink, t.p("a/b/f"))
            t.do("rmdir now empty", os.rmdir, t.p("a/b"))
            t.stat("a")
            t.stat("a/b")
            t.do("list a", os.listdir, t.p("a"))
            t.do("rmdir a", os.rmdir, t.p("a"))
            t.do("list root", os.listdir, t.root)

        self.assertParity(sc)


class TestMknod(MountedTestCase):
    def test_mknod_regular(self):
        def sc(t):
            t.do("mknod f", os.mknod, t.p("f"), 0o640 | stat.S_IFREG)
            t.stat("f")
            t.do("mknod f again", os.mknod, t.p("f"), 0o640 | stat.S_IFREG)
            t.call("write", write_file, t.p("f"), b"data")
            t.do("read", read_all, t.p("f"))
            t.do("mknod default type", os.mknod, t.p("g"), 0o600)
            t.stat("g")

        self.assertParity(sc)

    def test_fifo(self):
        def sc(t):
            t.do("mkfifo", os.mkfifo, t.p("q"), 0o600)
            t.stat("q")
            t.open("q", os.O_WRONLY | os.O_NONBLOCK)  # no reader: ENXIO
            r = t.open("q", os.O_RDONLY | os.O_NONBLOCK)
            w = t.open("q", os.O_WRONLY | os.O_NONBLOCK)
            if r is not None and w is not None:
                t.do("read empty", os.read, r, 10)
                t.do("write", os.write, w, b"hello")
                t.do("read", os.read, r, 10)
            t.close(w)
            t.close(r)
            t.do("mkfifo again", os.mkfifo, t.p("q"))
            t.do("unlink fifo", os.unlink, t.p("q"))

        log = self.assertParity(sc)
        # the read on the fifo returned the bytes on both (not just equal errors)
        self.assertIn(("read", ("ok", b"hello")), log)


class TestCreateOpenReadWrite(MountedTestCase):
    def test_create_open(self):
        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
            t.stat("f")
            t.do("write", os.write, fd, b"hello world")
            t.close(fd)
            t.open("f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            t.close(t.open("f", os.O_CREAT | os.O_WRONLY))
            t.do("read", read_all, t.p("f"))
            t.open("missing", os.O_RDONLY)
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.open("d", os.O_WRONLY)
            t.open("d", os.O_RDWR)
            t.close(t.open("d", os.O_RDONLY | os.O_DIRECTORY))
            t.open("f", os.O_RDONLY | os.O_DIRECTORY)
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.open("l", os.O_RDONLY | os.O_NOFOLLOW)
            t.open("l", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            t.close(t.open("f", os.O_WRONLY | os.O_TRUNC))
            t.stat("f")
            t.open("d/x/y", os.O_CREAT | os.O_WRONLY)
            t.open("f/y", os.O_CREAT | os.O_WRONLY)
            t.open("z" * 256, os.O_CREAT | os.O_WRONLY)

        self.assertParity(sc)

    def test_read_write_offsets(self):
        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_RDWR)
            t.do("pwrite 0", os.pwrite, fd, b"A" * 100, 0)
            t.do("pwrite 50", os.pwrite, fd, b"B" * 100, 50)
            t.do("pwrite beyond", os.pwrite, fd, b"C" * 10, 4096 * 3 + 7)
            t.do("pread all", os.pread, fd, 20000, 0)
            t.do("pread eof", os.pread, fd, 10, 1 << 20)
            t.do("pread mid", os.pread, fd, 30, 140)
            t.do("lseek cur", os.lseek, fd, 0, os.SEEK_CUR)
            t.do("write at pos", os.write, fd, b"D" * 5)
            t.do("lseek end", os.lseek, fd, 0, os.SEEK_END)
            t.do("read at end", os.read, fd, 10)
            t.do("fstat", os.fstat, fd)
            t.close(fd)
            ro = t.open("f", os.O_RDONLY)
            t.do("write on O_RDONLY", os.write, ro, b"x")
            t.close(ro)
            wo = t.open("f", os.O_WRONLY)
            t.do("read on O_WRONLY", os.read, wo, 1)
            t.close(wo)

        self.assertParity(sc)

    def test_flush_close_dup(self):
        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_WRONLY)
            d = t.call("dup", lambda: t.fds.append(os.dup(fd)) or t.fds[-1])
            t.do("write", os.write, fd, b"one")
            t.close(fd)
            t.do("write via dup", os.write, d, b"two")
            t.close(d)
            t.do("read", read_all, t.p("f"))

        self.assertParity(sc)

    def test_fsync(self):
        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_RDWR)
            t.do("write", os.write, fd, b"x" * 10000)
            t.do("fsync", os.fsync, fd)
            t.do("fdatasync", os.fdatasync, fd)
            t.close(fd)
            t.do("mkdir d", os.mkdir, t.p("d"))
            dfd = t.open("d", os.O_RDONLY | os.O_DIRECTORY)
            t.do("fsync dir", os.fsync, dfd)
            t.close(dfd)
            t.do("read", lambda: sha(read_all(t.p("f"))))

        self.assertParity(sc)

    def test_unlink(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"x")
            t.do("unlink", os.unlink, t.p("f"))
            t.stat("f")
            t.do("unlink again", os.unlink, t.p("f"))
            t.do("unlink missing dir", os.unlink, t.p("nodir/f"))
            t.do("symlink", os.symlink, "target", t.p("l"))
            t.do("unlink dangling symlink", os.unlink, t.p("l"))
            t.do("list", os.listdir, t.root)

        self.assertParity(sc)


class TestRename(MountedTestCase):
    def test_rename(self):
        def sc(t):
            t.call("create a", write_file, t.p("a"), b"AAA")
            t.call("create b", write_file, t.p("b"), b"BBBBB")
            t.do("rename a c", os.rename, t.p("a"), t.p("c"))
            t.stat("a")
            t.do("read c", read_all, t.p("c"))
            t.do("rename over existing", os.rename, t.p("c"), t.p("b"))
            t.do("read b", read_all, t.p("b"))
            t.stat("c")
            t.do("rename to self", os.rename, t.p("b"), t.p("b"))
            t.do("read b", read_all, t.p("b"))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("mkdir e", os.mkdir, t.p("e"))
            t.call("create e/x", write_file, t.p("e/x"), b"x")
            t.do("dir onto non-empty dir", os.rename, t.p("d"), t.p("e"))
            t.do("mkdir g", os.mkdir, t.p("g"))
            t.do("dir onto empty dir", os.rename, t.p("d"), t.p("g"))
            t.stat("d")
            t.stat("g")
            t.do("dir over file", os.rename, t.p("g"), t.p("b"))
            t.do("file over dir", os.rename, t.p("b"), t.p("g"))
            t.do("dir into itself", os.rename, t.p("e"), t.p("e/sub"))
            t.do("across dirs", os.rename, t.p("b"), t.p("e/b"))
            t.do("dir across dirs", os.rename, t.p("g"), t.p("e/g"))
            t.stat("e")
            t.stat("e/g")
            t.do("list e", lambda: sorted(os.listdir(t.p("e"))))
            t.do("rename missing", os.rename, t.p("nope"), t.p("x"))
            t.do("rename into missing dir", os.rename, t.p("e/b"), t.p("nodir/b"))
            t.do("rename dot", os.rename, t.p("e/."), t.p("z"))
            t.do("hardlink", os.link, t.p("e/x"), t.p("hx"))
            t.do("rename onto own hardlink", os.rename, t.p("e/x"), t.p("hx"))
            t.stat("e/x")
            t.stat("hx")
            t.do("list root", lambda: sorted(os.listdir(t.root)))

        self.assertParity(sc)

    def test_renameat2_noreplace(self):
        def sc(t):
            t.call("create a", write_file, t.p("a"), b"A")
            t.call("create b", write_file, t.p("b"), b"B")
            t.do("noreplace onto existing", harness.renameat2, t.p("a"), t.p("b"),
                 harness.RENAME_NOREPLACE)
            t.do("read a", read_all, t.p("a"))
            t.do("read b", read_all, t.p("b"))
            t.do("noreplace to new", harness.renameat2, t.p("a"), t.p("c"),
                 harness.RENAME_NOREPLACE)
            t.stat("a")
            t.do("read c", read_all, t.p("c"))
            t.do("noreplace|exchange", harness.renameat2, t.p("b"), t.p("c"),
                 harness.RENAME_NOREPLACE | harness.RENAME_EXCHANGE)

        self.assertParity(sc)

    def test_renameat2_exchange(self):
        def sc(t):
            t.call("create a", write_file, t.p("a"), b"AAA")
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.call("create d/x", write_file, t.p("d/x"), b"X")
            t.do("exchange a d", harness.renameat2, t.p("a"), t.p("d"), harness.RENAME_EXCHANGE)
            t.stat("a")
            t.stat("d")
            t.do("read d", read_all, t.p("d"))
            t.do("list a", os.listdir, t.p("a"))
            t.do("exchange with missing", harness.renameat2, t.p("d"), t.p("nope"),
                 harness.RENAME_EXCHANGE)
            t.call("create e", write_file, t.p("e"), b"EEEE")
            t.do("exchange files across dirs", harness.renameat2, t.p("e"), t.p("a/x"),
                 harness.RENAME_EXCHANGE)
            t.do("read e", read_all, t.p("e"))
            t.do("read a/x", read_all, t.p("a/x"))

        self.assertParity(sc)

    def test_rename_whiteout(self):
        """RENAME_WHITEOUT (overlayfs needs it of an upper directory): the
        old name becomes a character device 0/0."""
        WHITEOUT = 4

        def wh(t, a, b, flags):
            harness.renameat2(t.p(a), t.p(b), flags)

        def dev(p):
            st = os.lstat(p)
            return (stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev))

        def sc(t):
            t.call("create a", write_file, t.p("a"), b"aaa")
            t.do("whiteout a -> b", wh, t, "a", "b", WHITEOUT)
            t.do("a is a whiteout", dev, t.p("a"))
            t.stat("a")
            t.do("read b", read_all, t.p("b"))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.call("create d/c", write_file, t.p("d", "c"), b"c")
            t.do("whiteout over an existing name", wh, t, "b", "d/c", WHITEOUT)
            t.do("b is a whiteout", dev, t.p("b"))
            t.do("read d/c", read_all, t.p("d", "c"))
            t.do("whiteout with noreplace onto a name", wh, t, "d/c", "a",
                 WHITEOUT | harness.RENAME_NOREPLACE)
            t.do("whiteout with exchange", wh, t, "d/c", "a", WHITEOUT | harness.RENAME_EXCHANGE)
            t.do("whiteout of a directory", wh, t, "d", "e", WHITEOUT)
            t.do("d is a whiteout", dev, t.p("d"))
            t.do("listdir", sorted, os.listdir(t.root))
            t.do("whiteout of a missing name", wh, t, "nope", "x", WHITEOUT)

        self.assertParity(sc)

    def test_rename_over_open_file(self):
        a, b = self.m.path("a"), self.m.path("b")
        write_file(a, b"old content")
        fd = os.open(a, os.O_RDONLY)
        try:
            write_file(b, b"new content!")
            os.rename(b, a)
            self.assertEqual(os.pread(fd, 100, 0), b"old content")
            self.assertEqual(read_all(a), b"new content!")
            self.assertFalse(os.path.exists(b))
            self.assertEqual(os.fstat(fd).st_nlink, 0)
        finally:
            os.close(fd)
        self.assertEqual(read_all(a), b"new content!")
        # the replaced inode's hot file goes away once it is closed
        harness.wait_until(lambda: len(self.m.hot_files()) == 1, 5,
                           "only the surviving file's hot file to remain: %s"
                           % self.m.hot_files())


class TestLinks(MountedTestCase):
    def test_link(self):
        def sc(t):
            t.call("create a", write_file, t.p("a"), b"shared")
            t.do("link a b", os.link, t.p("a"), t.p("b"))
            t.stat("a")
            t.stat("b")
            t.do("link a c", os.link, t.p("a"), t.p("c"))
            t.stat("b")
            t.do("link onto existing", os.link, t.p("a"), t.p("b"))
            t.do("link missing", os.link, t.p("nope"), t.p("x"))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("link dir", os.link, t.p("d"), t.p("d2"))
            t.do("link into dir", os.link, t.p("a"), t.p("d/a"))
            t.stat("a")
            t.do("write via b", append_file, t.p("b"), b"+more")
            t.do("read d/a", read_all, t.p("d/a"))
            t.do("unlink a", os.unlink, t.p("a"))
            t.stat("b")
            t.do("unlink c", os.unlink, t.p("c"))
            t.do("unlink d/a", os.unlink, t.p("d/a"))
            t.stat("b")
            t.do("read b", read_all, t.p("b"))

        self.assertParity(sc)
        ia = os.stat(self.m.path("b")).st_ino
        os.link(self.m.path("b"), self.m.path("b2"))
        self.assertEqual(os.stat(self.m.path("b2")).st_ino, ia)

    def test_symlink(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"target data")
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.stat("l")
            t.do("stat follow", os.stat, t.p("l"))
            t.do("readlink", os.readlink, t.p("l"))
            t.do("read through", read_all, t.p("l"))
            t.do("dangling", os.symlink, "nowhere/x", t.p("dl"))
            t.do("stat dangling follow", os.stat, t.p("dl"))
            t.stat("dl")
            t.do("readlink file", os.readlink, t.p("f"))
            t.do("symlink onto existing", os.symlink, "f", t.p("l"))
            long_target = "/".join(["d" * 200] * 5)
            t.do("long target", os.symlink, long_target, t.p("long"))
            t.do("readlink long", os.readlink, t.p("long"))
            t.do("abs target", os.symlink, "/etc/hostname-nope", t.p("abs"))
            t.do("readlink abs", os.readlink, t.p("abs"))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("dir link", os.symlink, "d", t.p("dl2"))
            t.call("create via dir link", write_file, t.p("dl2/x"), b"y")
            t.do("list d", os.listdir, t.p("d"))
            t.do("loop a", os.symlink, "loopb", t.p("loopa"))
            t.do("loop b", os.symlink, "loopa", t.p("loopb"))
            t.do("stat loop", os.stat, t.p("loopa"))

        self.assertParity(sc)


class TestReaddir(MountedTestCase):
    N = 5000

    def test_many_entries(self):
        def sc(t):
            os.mkdir(t.p("big"))
            for i in range(self.N):
                name = t.p("big", "e%05d" % i)
                if i % 50 == 0:
                    os.mkdir(name)
                elif i % 50 == 1:
                    os.symlink("target", name)
                else:
                    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
            names = os.listdir(t.p("big"))
            t.note("count", len(names))
            t.note("unique", len(set(names)))
            t.note("sorted names", sha("\n".join(sorted(names)).encode()))
            kinds = sorted((e.name, e.is_dir(follow_symlinks=False),
                            e.is_file(follow_symlinks=False), e.is_symlink())
                           for e in os.scandir(t.p("big")))
            t.note("scandir kinds", sha(repr(kinds).encode()))
            t.note("empty dir", os.listdir(t.p("big", "e00000")))
            t.stat("big")

        log = self.assertParity(sc)
        self.assertIn(("count", ("val", self.N)), log)

    def test_entries_stable_while_deleting(self):
        d = self.m.path("d")
        os.mkdir(d)
        n = 3000
        names = ["f%05d" % i for i in range(n)]
        for nm in names:
            os.close(os.open(os.path.join(d, nm), os.O_CREAT | os.O_WRONLY, 0o644))
        # victims: deleted before we reach them (may or may not be seen)
        victims = names[::7][::-1]
        seen = []
        deleted_unseen = set()
        with os.scandir(d) as it:
            for i, e in enumerate(it):
                seen.append(e.name)
                try:
                    os.unlink(os.path.join(d, e.name))  # delete what was just seen (rm -r)
                except FileNotFoundError:
                    # a victim deleted after readdir had buffered it: allowed
                    self.assertIn(e.name, deleted_unseen)
                if i % 5 == 0:
                    while victims:
                        v = victims.pop()
                        if v not in seen:
                            os.unlink(os.path.join(d, v))
                            deleted_unseen.add(v)
                            break
        dups = sorted({x for x in seen if seen.count(x) > 1}) if len(seen) != len(set(seen)) \
            else []
        self.assertEqual(dups, [], "entries returned twice during deletion")
        missed = sorted(set(names) - set(seen) - deleted_unseen)
        self.assertEqual(missed, [], "%d live entries were skipped" % len(missed))
        self.assertTrue(set(seen) <= set(names))
        self.assertEqual(os.listdir(d), [])

    def test_renames_while_reading(self):
        """Each entry read is renamed away and back (a new cookie, past the
        end): the listing still ends, with each name once and every name
        that was there at opendir (xfstests generic/736 looped)."""
        d = self.m.path("d")
        os.mkdir(d)
        names = {str(i) for i in range(1, 2001)}
        for n in names:
            os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
        seen = []
        with os.scandir(d) as it:
            for e in it:
                seen.append(e.name)
                self.assertLessEqual(len(seen), 3 * len(names), "readdir does not end")
                os.rename(os.path.join(d, e.name), os.path.join(d, "TEMPFILE"))
                os.rename(os.path.join(d, "TEMPFILE"), os.path.join(d, e.name))
        self.assertEqual(len(seen), len(set(seen)))
        self.assertEqual(set(seen), names)
        # a new listing (a new opendir) sees them all again
        self.assertEqual(set(os.listdir(d)), names)

    def test_readdir_offsets_restart(self):
        """Two interleaved readers of one directory each see every entry once."""
        d = self.m.path("d")
        os.mkdir(d)
        for i in range(1000):
            os.close(os.open(os.path.join(d, "n%04d" % i), os.O_CREAT | os.O_WRONLY))
        it1, it2 = os.scandir(d), os.scandir(d)
        try:
            a, b = [], []
            for x, y in zip(it1, it2):
                a.append(x.name)
                b.append(y.name)
            a += [x.name for x in it1]
            b += [y.name for y in it2]
        finally:
            it1.close()
            it2.close()
        self.assertEqual(sorted(a), ["n%04d" % i for i in range(1000)])
        self.assertEqual(sorted(b), sorted(a))


class TestStatfs(MountedTestCase):
    def test_statvfs_sane(self):
        s = os.statvfs(self.mnt)
        self.assertGreater(s.f_bsize, 0)
        self.assertGreater(s.f_frsize, 0)
        self.assertGreater(s.f_blocks, 0)
        self.assertLessEqual(s.f_bfree, s.f_blocks)
        self.assertLessEqual(s.f_bavail, s.f_bfree)
        self.assertGreaterEqual(s.f_namemax, 255)
        self.assertGreaterEqual(s.f_files, s.f_ffree)
        # the same from a file inside
        write_file(self.m.path("f"), b"x")
        s2 = os.statvfs(self.m.path("f"))
        self.assertEqual(s2.f_blocks, s.f_blocks)

    def test_statvfs_reflects_usage(self):
        s0 = os.statvfs(self.mnt)
        write_file(self.m.path("f"), pattern(16 * MiB))
        s1 = os.statvfs(self.mnt)
        used = (s0.f_bfree - s1.f_bfree) * s1.f_frsize
        self.assertGreaterEqual(used, 8 * MiB, "writing 16 MiB did not lower f_bfree")
        os.unlink(self.m.path("f"))

        def space_back():
            s = os.statvfs(self.mnt)
            return s.f_bfree * s.f_frsize >= s0.f_bfree * s0.f_frsize - MiB

        harness.wait_until(space_back, 5, "free space to come back after unlink")


class TestXattr(MountedTestCase):
    def test_user_xattrs(self):
        X = harness

        def sc(t):
            f = t.p("f")
            t.call("create f", write_file, f, b"x")
            t.do("get missing", os.getxattr, f, "user.a")
            t.do("remove missing", os.removexattr, f, "user.a")
            t.do("list empty", os.listxattr, f)
            t.do("set a", os.setxattr, f, "user.a", b"1")
            t.do("get a", os.getxattr, f, "user.a")
            t.do("create existing", os.setxattr, f, "user.a", b"2", X.XATTR_CREATE)
            t.do("get a", os.getxattr, f, "user.a")
            t.do("replace missing", os.setxattr, f, "user.b", b"2", X.XATTR_REPLACE)
            t.do("replace existing", os.setxattr, f, "user.a", b"22", X.XATTR_REPLACE)
            t.do("get a", os.getxattr, f, "user.a")
            t.do("create new", os.setxattr, f, "user.b", b"", X.XATTR_CREATE)
            t.do("get empty value", os.getxattr, f, "user.b")
            t.do("set binary", os.setxattr, f, "user.bin", bytes(range(256)) * 16)
            t.do("get binary", os.getxattr, f, "user.bin")
            t.do("list", lambda: sorted(os.listxattr(f)))
            t.do("remove a", os.removexattr, f, "user.a")
            t.do("get removed", os.getxattr, f, "user.a")
            t.do("list after remove", lambda: sorted(os.listxattr(f)))
            t.do("mkdir d", os.mkdir, t.p("d"))
            t.do("set on dir", os.setxattr, t.p("d"), "user.dir", b"dv")
            t.do("get on dir", os.getxattr, t.p("d"), "user.dir")
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.do("set via symlink", os.setxattr, t.p("l"), "user.via", b"v")
            t.do("get on target", os.getxattr, f, "user.via")
            t.do("set on symlink itself", os.setxattr, t.p("l"), "user.no", b"v",
                 follow_symlinks=False)
            t.do("get missing file", os.getxattr, t.p("nope"), "user.a")
            t.do("set no namespace", os.setxattr, f, "noprefix", b"v")
            t.do("set empty name", os.setxattr, f, "user.", b"v")
            fd = t.open("f", os.O_RDONLY)
            t.do("fsetxattr", os.setxattr, fd, "user.fd", b"fdv")
            t.do("fgetxattr", os.getxattr, fd, "user.fd")
            t.close(fd)
            t.do("rename keeps xattrs", os.rename, f, t.p("g"))
            t.do("list g", lambda: sorted(os.listxattr(t.p("g"))))

        self.assertParity(sc)

    def test_trusted_and_security_xattrs(self):
        """trusted.* (root's only: hidden from others' listings, EPERM to
        set) and security.*, on files, directories and symlinks themselves."""
        if os.geteuid() != 0:
            self.skipTest("needs root (trusted.*, and a caller without it)")
        self.m.stop()
        self.m = self.mount(opts=("allow_other", "default_permissions"))
        self.mnt = self.m.mnt

        def sc(t):
            f = t.p("f")
            t.call("create f", write_file, f, b"x")
            t.do("set trusted", os.setxattr, f, "trusted.t", b"tv")
            t.do("set security", os.setxattr, f, "security.s", b"sv")
            t.do("set user", os.setxattr, f, "user.u", b"uv")
            t.do("get trusted", os.getxattr, f, "trusted.t")
            t.do("get security", os.getxattr, f, "security.s")
            t.do("list", lambda: sorted(os.listxattr(f)))
            t.do("set trusted empty name", os.setxattr, f, "trusted.", b"v")
            t.do("symlink", os.symlink, "f", t.p("l"))
            t.do("trusted on the symlink", os.setxattr, t.p("l"), "trusted.l", b"lv",
                 follow_symlinks=False)
            t.do("list symlink", lambda: sorted(os.listxattr(t.p("l"), follow_symlinks=False)))
            t.do("mkdir", os.mkdir, t.p("d"))
            t.do("security on dir", os.setxattr, t.p("d"), "security.d", b"dv")
            fd = t.open("f", os.O_RDWR)
            t.do("nobody lists", as_nobody, lambda: sorted(os.listxattr(fd)))
            t.do("nobody gets trusted", as_nobody, os.getxattr, fd, "trusted.t")
            t.do("nobody sets trusted", as_nobody, os.setxattr, fd, "trusted.n", b"n")
            t.do("nobody removes trusted", as_nobody, os.removexattr, fd, "trusted.t")
            t.do("nobody gets security", as_nobody, os.getxattr, fd, "security.s")
            t.close(fd)
            t.do("remove trusted", os.removexattr, f, "trusted.t")
            t.do("remove security", os.removexattr, f, "security.s")
            t.do("list after", lambda: sorted(os.listxattr(f)))

        log = self.assertParity(sc)
        self.assertIn(("nobody lists", ("ok", "['security.s', 'user.u']")), log)
        self.assertIn(("list", ("ok", ["security.s", "trusted.t", "user.u"])), log)

    def test_xattr_survives_reopen_and_many(self):
        f = self.m.path("f")
        write_file(f, b"x")
        for i in range(100):
            os.setxattr(f, "user.k%03d" % i, b"v%d" % i)
        self.assertEqual(sorted(os.listxattr(f)), ["user.k%03d" % i for i in range(100)])
        for i in range(0, 100, 9):
            self.assertEqual(os.getxattr(f, "user.k%03d" % i), b"v%d" % i)


class TestFallocate(MountedTestCase):
    def test_fallocate_parity(self):
        def blocks_ge(p, n):
            return os.stat(p).st_blocks * 512 >= n

        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_RDWR)
            t.do("posix_fallocate", os.posix_fallocate, fd, 0, MiB)
            t.do("fstat", os.fstat, fd)
            t.do("blocks", blocks_ge, t.p("f"), MiB)
            t.do("content", lambda: os.pread(fd, MiB, 0) == bytes(MiB))
            t.do("keep_size", harness.fallocate, fd, harness.FALLOC_FL_KEEP_SIZE, MiB, MiB)
            t.do("fstat", os.fstat, fd)
            t.do("blocks after keep_size", blocks_ge, t.p("f"), 2 * MiB)
            t.do("write", os.pwrite, fd, b"\xab" * MiB, 0)
            t.do("punch", harness.fallocate, fd,
                 harness.FALLOC_FL_PUNCH_HOLE | harness.FALLOC_FL_KEEP_SIZE, 256 * 1024,
                 256 * 1024)
            t.do("fstat", os.fstat, fd)
            data = os.pread(fd, MiB, 0)
            t.note("punched range zero", data[256 * 1024:512 * 1024] == bytes(256 * 1024))
            t.note("rest intact", data[:256 * 1024] + data[512 * 1024:] == b"\xab" * (768 * 1024))
            t.do("punch without keep_size", harness.fallocate, fd, harness.FALLOC_FL_PUNCH_HOLE,
                 0, 4096)
            t.do("fallocate extends", os.posix_fallocate, fd, 3 * MiB, 4096)
            t.do("fstat", os.fstat, fd)
            t.do("bad length", harness.fallocate, fd, 0, 0, 0)
            t.close(fd)
            ro = t.open("f", os.O_RDONLY)
            t.do("fallocate on O_RDONLY", harness.fallocate, ro, 0, 0, 4096)
            t.close(ro)

        self.assertParity(sc)

    def test_punch_hole_frees_blocks(self):
        p = self.m.path("f")
        write_file(p, pattern(4 * MiB))
        b0 = os.stat(p).st_blocks * 512
        self.assertGreaterEqual(b0, 4 * MiB)
        fd = os.open(p, os.O_RDWR)
        try:
            harness.fallocate(fd, harness.FALLOC_FL_PUNCH_HOLE | harness.FALLOC_FL_KEEP_SIZE,
                              MiB, 2 * MiB)
        finally:
            os.close(fd)
        st = os.stat(p)
        self.assertEqual(st.st_size, 4 * MiB)
        self.assertLessEqual(st.st_blocks * 512, b0 - 2 * MiB + 64 * 1024)
        data = read_all(p)
        self.assertEqual(data[MiB:3 * MiB], bytes(2 * MiB))
        ref = pattern(4 * MiB)
        self.assertEqual(data[:MiB], ref[:MiB])
        self.assertEqual(data[3 * MiB:], ref[3 * MiB:])


    def test_zero_range(self):
        """FALLOC_FL_ZERO_RANGE, with and without KEEP_SIZE, across EOF (tmpfs,
        the hot tier, has none: spillway punches and allocates; no parity
        with tmpfs then: the expected bytes are built here)."""
        ZERO = 0x10
        fd = os.open(self.m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.pwrite(fd, b"\xab" * (3 * MiB), 0)
            harness.fallocate(fd, ZERO, MiB + 5, MiB + 2)
            want = bytearray(b"\xab" * (3 * MiB))
            want[MiB + 5:2 * MiB + 7] = bytes(MiB + 2)
            self.assertEqual(os.fstat(fd).st_size, 3 * MiB)
            self.assertEqual(os.pread(fd, 4 * MiB, 0), bytes(want))
            harness.fallocate(fd, ZERO | harness.FALLOC_FL_KEEP_SIZE, 3 * MiB - 10, 100)
            want[3 * MiB - 10:] = bytes(10)
            self.assertEqual(os.fstat(fd).st_size, 3 * MiB)
            self.assertGreaterEqual(os.fstat(fd).st_blocks * 512, 3 * MiB)
            harness.fallocate(fd, ZERO, 3 * MiB - 10, 4096)
            want += bytes(4096 - 10)
            self.assertEqual(os.fstat(fd).st_size, 3 * MiB - 10 + 4096)
            self.assertEqual(os.pread(fd, 4 * MiB, 0), bytes(want))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.assertEqual(read_all(self.m.path("f")), bytes(want))

    def test_enospc_up_front(self):
        """An allocation far larger than every tier's free room fails at once
        with ENOSPC and allocates nothing (xfstests generic/213)."""
        sv = os.statvfs(self.mnt)
        room = sv.f_bavail * sv.f_frsize
        p = self.m.path("big")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.pwrite(fd, b"x" * 4096, 0)
            t0 = time.monotonic()
            with self.assertRaises(OSError) as cm:
                os.posix_fallocate(fd, 0, 2 * room + (1 << 30))
            took = time.monotonic() - t0
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.assertEqual(st.st_size, 4096)
        self.assertLess(st.st_blocks * 512, MiB)
        self.assertLess(took, 5.0 * harness.TIME_SCALE)
        # what fits is still allocated
        fd = os.open(p, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 2 * MiB)
            self.assertEqual(os.fstat(fd).st_size, 2 * MiB)
        finally:
            os.close(fd)


def name_to_handle(path):
    """The file handle of path (name_to_handle_at), as bytes."""
    buf = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("Ii", buf, 0, 128, 0)
    mount_id = ctypes.c_int()
    if harness.libc.name_to_handle_at(-100, os.fsencode(path), buf, ctypes.byref(mount_id),
                                      0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    n = struct.unpack_from("I", buf, 0)[0]
    return buf.raw[:8 + n]


def open_by_handle(mount_path, handle, flags):
    """open_by_handle_at on the mount at mount_path; returns the fd."""
    mfd = os.open(mount_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = harness.libc.open_by_handle_at(mfd, ctypes.create_string_buffer(handle, len(handle)),
                                            flags)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd
    finally:
        os.close(mfd)


class TestExport(harness.SpwTestCase):
    """File handles (FUSE export support): open_by_handle_at finds a file and
    a directory by inode number, also once the kernel forgot them and after
    a remount; a removed file's handle is stale (xfstests generic/426, 467,
    477, 756, 777)."""

    def test_handles_survive_remount(self):
        base = self.tmpdir()
        cold, state = os.path.join(base, "cold"), os.path.join(base, "state")
        os.mkdir(cold)
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        opts = ("nvme=" + cold, "state_dir=" + state)
        m = self.mount(hot_dir=hot, opts=opts)
        os.makedirs(m.path("d/e"))
        write_file(m.path("d/e/f"), b"handle me")
        write_file(m.path("gone"), b"x")
        hf, hd, hg = (name_to_handle(m.path(r)) for r in ("d/e/f", "d/e", "gone"))
        fd = open_by_handle(m.mnt, hf, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, 100, 0), b"handle me")
        finally:
            os.close(fd)
        os.unlink(m.path("gone"))
        with self.assertRaises(OSError) as cm:
            os.close(open_by_handle(m.mnt, hg, os.O_RDONLY))
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        m.stop()

        m2 = self.mount(hot_dir=hot, opts=opts)
        # a new connection: the kernel knows none of these inodes
        fd = open_by_handle(m2.mnt, hf, os.O_RDWR)
        try:
            self.assertEqual(os.pread(fd, 100, 0), b"handle me")
            os.pwrite(fd, b"H", 0)
        finally:
            os.close(fd)
        self.assertEqual(read_all(m2.path("d/e/f")), b"Handle me")
        # a directory handle is connected through its ".." lookups
        fd = open_by_handle(m2.mnt, hd, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.assertEqual(os.listdir(fd), ["f"])
            self.assertEqual(os.stat("..", dir_fd=fd).st_ino, os.stat(m2.path("d")).st_ino)
        finally:
            os.close(fd)
        with self.assertRaises(OSError) as cm:
            os.close(open_by_handle(m2.mnt, hg, os.O_RDONLY))
        self.assertEqual(cm.exception.errno, errno.ESTALE)


class TestSeekHoles(MountedTestCase):
    def test_seek_data_hole(self):
        p = self.m.path("sparse")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.pwrite(fd, b"x" * 4096, 0)
            os.pwrite(fd, b"y" * 4096, 8 * MiB)
            size = 8 * MiB + 4096
            self.assertEqual(os.fstat(fd).st_size, size)
            self.assertEqual(os.lseek(fd, 0, os.SEEK_DATA), 0)
            h = os.lseek(fd, 0, os.SEEK_HOLE)
            self.assertGreaterEqual(h, 4096)
            self.assertLess(h, 8 * MiB, "no hole reported where nothing was ever written")
            self.assertEqual(os.lseek(fd, h, os.SEEK_DATA), 8 * MiB)
            self.assertEqual(os.lseek(fd, 8 * MiB, os.SEEK_HOLE), size)
            for whence in (os.SEEK_DATA, os.SEEK_HOLE):
                with self.assertRaises(OSError) as cm:
                    os.lseek(fd, size, whence)
                self.assertEqual(cm.exception.errno, errno.ENXIO)
            self.assertEqual(os.pread(fd, 4096, 4 * MiB), bytes(4096))
        finally:
            os.close(fd)

    def test_seek_parity(self):
        def sc(t):
            fd = t.open("s", os.O_CREAT | os.O_RDWR)
            t.do("truncate 10M", os.ftruncate, fd, 10 * MiB)
            t.do("data in all-hole file", os.lseek, fd, 0, os.SEEK_DATA)
            t.do("hole at 0", os.lseek, fd, 0, os.SEEK_HOLE)
            t.do("write at 5M", os.pwrite, fd, b"z" * 8192, 5 * MiB)
            t.do("data from 0", os.lseek, fd, 0, os.SEEK_DATA)
            t.do("data past last", os.lseek, fd, 6 * MiB, os.SEEK_DATA)
            t.do("hole past EOF", os.lseek, fd, 11 * MiB, os.SEEK_HOLE)
            t.do("negative", os.lseek, fd, -1, os.SEEK_DATA)
            t.close(fd)

        self.assertParity(sc)


class TestAccess(MountedTestCase):
    def test_access(self):
        def sc(t):
            for name, mode in (("f644", 0o644), ("f755", 0o755), ("f000", 0o000),
                               ("f100", 0o100), ("f010", 0o010)):
                t.call("create " + name, write_file, t.p(name), b"x", mode)
                t.do("chmod", os.chmod, t.p(name), mode)
                for m, mn in ((os.F_OK, "F"), (os.R_OK, "R"), (os.W_OK, "W"), (os.X_OK, "X"),
                              (os.R_OK | os.W_OK | os.X_OK, "RWX")):
                    t.do("access %s %s" % (name, mn), os.access, t.p(name), m)
            t.do("mkdir d", os.mkdir, t.p("d"), 0o000)
            t.do("access dir X", os.access, t.p("d"), os.X_OK)
            t.do("access missing", os.access, t.p("nope"), os.F_OK)
            t.do("access through file", os.access, t.p("f644/x"), os.F_OK)

        self.assertParity(sc)


class TestOpenFileLifetime(MountedTestCase):
    def test_unlink_while_open(self):
        p = self.m.path("f")
        before = set(self.m.hot_files())
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, pattern(2 * MiB))
            os.fsync(fd)
            new = sorted(set(self.m.hot_files()) - before)
            self.assertEqual(len(new), 1, "expected one new hot file, got %s" % new)
            os.unlink(p)
            self.assertFalse(os.path.exists(p))
            self.assertNotIn("f", os.listdir(self.mnt))
            self.assertEqual(os.fstat(fd).st_nlink, 0)
            self.assertEqual(fd_read_all(fd), pattern(2 * MiB))
            os.pwrite(fd, b"after unlink", MiB)
            os.pwrite(fd, b"tail", 3 * MiB)
            data = fd_read_all(fd)
            self.assertEqual(len(data), 3 * MiB + 4)
            self.assertEqual(data[MiB:MiB + 12], b"after unlink")
            self.assertEqual(data[:MiB], pattern(MiB))
            self.assertEqual(data[2 * MiB:3 * MiB], bytes(MiB))
            # a new file with the same name is a different file
            write_file(p, b"other")
            self.assertEqual(read_all(p), b"other")
            self.assertEqual(os.pread(fd, 12, MiB), b"after unlink")
        finally:
            os.close(fd)
        harness.wait_until(lambda: new[0] not in os.listdir(self.m.hot_dir), 5,
                           "hot file %s of the unlinked file to disappear after close" % new[0])
        self.assertEqual(read_all(p), b"other")

    def test_unlink_while_mmapped(self):
        p = self.m.path("f")
        write_file(p, pattern(MiB))
        fd = os.open(p, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, MiB, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        try:
            os.unlink(p)
            self.assertEqual(mm[:4096], pattern(4096))
            mm[0:5] = b"WRITE"
            mm.flush()
            self.assertEqual(mm[0:5], b"WRITE")
        finally:
            mm.close()
        harness.wait_until(lambda: self.m.hot_files() == [], 5,
                           "hot dir to be empty after the mapping went away: %s"
                           % self.m.hot_files())


class TestMmap(MountedTestCase):
    def test_shared_write_reaches_daemon(self):
        p = self.m.path("f")
        size = 3 * MiB
        before = set(self.m.hot_files())
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            try:
                mm[100:105] = b"hello"
                mm[2 * MiB + 7:2 * MiB + 12] = b"world"
                mm.flush()  # msync(MS_SYNC)
                fd2 = os.open(p, os.O_RDONLY)
                try:
                    self.assertEqual(os.pread(fd2, 5, 100), b"hello")
                    self.assertEqual(os.pread(fd2, 5, 2 * MiB + 7), b"world")
                finally:
                    os.close(fd2)
                # coherence the other way: write() shows up in the mapping
                os.pwrite(fd, b"via write", 5000)
                self.assertEqual(mm[5000:5009], b"via write")
            finally:
                mm.close()
        finally:
            os.close(fd)
        data = read_all(p)
        self.assertEqual(len(data), size)
        self.assertEqual(data[100:105], b"hello")
        self.assertEqual(data[2 * MiB + 7:2 * MiB + 12], b"world")
        self.assertEqual(data[:100], bytes(100))
        # after msync the bytes are in the daemon's hot file, not only the page cache
        new = sorted(set(self.m.hot_files()) - before)
        self.assertEqual(len(new), 1, "expected one new hot file, got %s" % new)
        with open(os.path.join(self.m.hot_dir, new[0]), "rb") as f:
            f.seek(100)
            self.assertEqual(f.read(5), b"hello")
            f.seek(2 * MiB + 7)
            self.assertEqual(f.read(5), b"world")

    def test_private_mapping_not_visible(self):
        p = self.m.path("f")
        write_file(p, b"A" * 8192)
        fd = os.open(p, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, 8192, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
            try:
                mm[0:4] = b"PRIV"
                self.assertEqual(mm[0:4], b"PRIV")
                self.assertEqual(os.pread(fd, 4, 0), b"AAAA")
            finally:
                mm.close()
        finally:
            os.close(fd)
        self.assertEqual(read_all(p), b"A" * 8192)

    def test_shared_read_of_written_data(self):
        p = self.m.path("f")
        data = pattern(5 * MiB + 123, seed=3)
        write_file(p, data)
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ)
            try:
                self.assertEqual(len(mm), len(data))
                self.assertEqual(sha(mm[:]), sha(data))
            finally:
                mm.close()


def link_fd(fd, path):
    """linkat(2) of an open file to path (what names an O_TMPFILE file;
    os.link would link /proc's symlink itself)."""
    harness.libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                    ctypes.c_char_p, ctypes.c_int]
    if harness.libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, os.fsencode(path),
                           0x400) != 0:  # AT_SYMLINK_FOLLOW
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


class TestTmpfile(MountedTestCase):
    """O_TMPFILE: a file with no name, gone at close unless linkat names it
    (xfstests generic/004 and others)."""

    def test_tmpfile_parity(self):
        def sc(t):
            t.do("mkdir d", os.mkdir, t.p("d"))
            fd = t.open("d", os.O_TMPFILE | os.O_RDWR, 0o640)
            t.do("write", os.pwrite, fd, b"tmp data", 0)
            t.do("fstat", os.fstat, fd)
            t.do("listdir", sorted, os.listdir(t.p("d")))
            t.do("link", link_fd, fd, t.p("d", "named"))
            t.do("listdir", sorted, os.listdir(t.p("d")))
            t.do("fstat", os.fstat, fd)
            t.close(fd)
            t.do("read", read_all, t.p("d", "named"))
            ex = t.open("d", os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
            t.do("link of O_EXCL", link_fd, ex, t.p("d", "x"))
            t.close(ex)
            t.do("on a file", os.open, t.p("d", "named"), os.O_TMPFILE | os.O_RDWR)
            t.do("listdir", sorted, os.listdir(t.p("d")))

        log = self.assertParity(sc)
        self.assertIn(("read", ("ok", b"tmp data")), log)

    def test_unlinked_tmpfile_leaves_nothing(self):
        fd = os.open(self.mnt, os.O_TMPFILE | os.O_RDWR, 0o600)
        try:
            os.pwrite(fd, pattern(3 * MiB), 0)
            self.assertEqual(os.pread(fd, 3 * MiB, 0), pattern(3 * MiB))
            self.assertEqual(os.fstat(fd).st_nlink, 0)
            self.assertTrue(self.m.hot_files(), "the tmpfile's data is in no hot file")
        finally:
            os.close(fd)
        self.assertEqual(os.listdir(self.mnt), [])
        # the kernel sends the release after close returns
        harness.wait_until(lambda: not self.m.hot_files(), 5 * harness.TIME_SCALE,
                           "the tmpfile's hot file to be removed at its last close")


def facl(*argv):
    """Run setfacl/getfacl; their output, or the error's first line."""
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    out = r.stdout.decode(errors="replace")
    return out if r.returncode == 0 else "exit %d" % r.returncode


class TestAcl(MountedTestCase):
    """POSIX ACLs (FUSE_CAP_POSIX_ACL, with default_permissions): setfacl and
    getfacl, the mode kept in step (and a chmod keeping the ACL in step),
    default ACLs inherited by new files and directories in place of the
    umask; the kernel enforces them."""

    mount_kw = {"opts": ("allow_other", "default_permissions")}

    def test_acl_parity(self):
        if not shutil.which("setfacl"):
            self.skipTest("no setfacl (apt-get install acl)")
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)

        def sc(t):
            f, d = t.p("f"), t.p("d")
            t.call("create f", write_file, f, b"x")
            t.do("setfacl u:nobody:rw", facl, "setfacl", "-m", "u:nobody:rw", f)
            t.do("getfacl", facl, "getfacl", "-cp", f)
            t.stat("f")
            t.do("chmod 640", os.chmod, f, 0o640)
            t.do("getfacl after chmod", facl, "getfacl", "-cp", f)
            t.do("setfacl equal to the mode", facl, "setfacl", "-b", f)
            t.do("getfacl after -b", facl, "getfacl", "-cp", f)
            t.stat("f")
            t.do("mkdir d", os.mkdir, d)
            t.do("default acl", facl, "setfacl", "-d", "-m", "u:nobody:rwx,o::-", d)
            t.do("default on a file", facl, "setfacl", "-d", "-m", "u:nobody:r", f)
            t.call("create d/g", write_file, t.p("d", "g"), b"g", 0o666)
            t.do("mkdir d/e", os.mkdir, t.p("d", "e"), 0o777)
            t.do("mknod d/p", os.mkfifo, t.p("d", "p"), 0o644)
            for n in ("g", "e", "p"):
                t.stat("d/" + n)
                t.do("getfacl d/" + n, facl, "getfacl", "-cp", t.p("d", n))
            t.call("create d/e/h", write_file, t.p("d", "e", "h"), b"h", 0o600)
            t.do("getfacl d/e/h", facl, "getfacl", "-cp", t.p("d", "e", "h"))
            t.do("remove the default", facl, "setfacl", "-k", d)
            t.call("create d/u", write_file, t.p("d", "u"), b"u", 0o666)
            t.stat("d/u")
            t.do("getfacl d/u", facl, "getfacl", "-cp", t.p("d", "u"))
            t.do("setfacl bad", facl, "setfacl", "-m", "u:nobody:rw,u:nobody:r", f)

        log = self.assertParity(sc)
        self.assertIn(("getfacl d/g", ("ok", "user::rw-\nuser:nobody:rwx\t#effective:rw-\n"
                                               "group::r-x\t#effective:r--\nmask::rw-\n"
                                               "other::---\n\n")), log)

    def test_acl_enforced_and_kept(self):
        """The kernel enforces what the daemon stores: nobody cannot write a
        0600 file until a named entry for nobody lets it."""
        if not shutil.which("setfacl"):
            self.skipTest("no setfacl (apt-get install acl)")
        os.chmod(self.m.base, 0o755)
        os.chmod(self.mnt, 0o755)
        f = self.m.path("f")
        write_file(f, b"x", 0o600)

        def nobody_appends():
            with open(f, "ab") as fh:
                return fh.write(b"n")

        self.assertEqual(as_nobody(nobody_appends), "EACCES")
        self.assertNotEqual(facl("setfacl", "-m", "u:nobody:rw", f)[:4], "exit")
        self.assertEqual(as_nobody(nobody_appends), "1")
        self.assertEqual(read_all(f), b"xn")
        self.assertIn("user:nobody:rw-", facl("getfacl", "-cp", f))


class TestAppendTruncate(MountedTestCase):
    def test_o_append(self):
        def sc(t):
            t.call("create f", write_file, t.p("f"), b"start:")
            a = t.open("f", os.O_WRONLY | os.O_APPEND)
            b = t.open("f", os.O_WRONLY | os.O_APPEND)
            for i in range(5):
                t.do("write a", os.write, a, b"a%d," % i)
                t.do("write b", os.write, b, b"b%d," % i)
            t.do("lseek a 0", os.lseek, a, 0, os.SEEK_SET)
            t.do("write a after seek", os.write, a, b"END")
            t.do("pwrite appends too (linux)", os.pwrite, b, b"P", 0)
            t.close(a)
            t.close(b)
            t.do("read", read_all, t.p("f"))
            c = t.open("new", os.O_CREAT | os.O_WRONLY | os.O_APPEND)
            t.do("append to new", os.write, c, b"xyz")
            t.close(c)
            t.do("read new", read_all, t.p("new"))

        self.assertParity(sc)

    def test_ftruncate_shrink_grow(self):
        def sc(t):
            fd = t.open("f", os.O_CREAT | os.O_RDWR)
            t.do("write 3M", os.pwrite, fd, pattern(3 * MiB), 0)
            t.do("shrink", os.ftruncate, fd, MiB + 5)
            t.do("fstat", os.fstat, fd)
            t.do("grow", os.ftruncate, fd, 6 * MiB)
            data = os.pread(fd, 7 * MiB, 0)
            t.note("len", len(data))
            t.note("kept", data[:MiB + 5] == pattern(MiB + 5))
            t.note("zeros", data[MiB + 5:] == bytes(6 * MiB - MiB - 5))
            t.do("shrink to 0", os.ftruncate, fd, 0)
            t.do("read", os.pread, fd, 10, 0)
            t.do("grow small", os.ftruncate, fd, 10)
            t.do("read", os.pread, fd, 20, 0)
            t.do("write mid", os.pwrite, fd, b"Q", 4)
            t.do("read", os.pread, fd, 20, 0)
            t.close(fd)

        log = self.assertParity(sc)
        self.assertIn(("zeros", ("val", True)), log)


def as_nobody(fn, *args):
    """fn(*args) in a child that dropped to nobody (no capabilities); returns
    repr() of what fn returned, or of the OSError's errno name."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                res = repr(fn(*args))
            except OSError as e:
                res = errno.errorcode.get(e.errno, str(e.errno))
            os.write(w, res.encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        out = b""
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            out += b
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return out.decode()


def write_as_nobody(fd, data):
    """Write data to fd as nobody (no CAP_FSETID)."""
    return as_nobody(os.write, fd, data)


class TestSetid(MountedTestCase):
    """A write clears set-user-ID and set-group-ID as the VFS decides: never
    for a caller with CAP_FSETID (the owner here is root), set-group-ID only
    with group-execute (xfstests generic/193, 355). With passthrough on and
    off: the daemon used to clear both on every write. A caller outside the
    file's group loses set-group-ID on the mode the kernel sets (683, 684)."""

    mount_kw = {"opts": ("allow_other", "default_permissions")}

    def scenario(self, t):
        for mode in (0o2644, 0o6755, 0o2666, 0o4666, 0o6777, 0o6766):
            t.call("create", write_file, t.p("f%o" % mode), b"x")
            t.do("chmod %o" % mode, os.chmod, t.p("f%o" % mode), mode)
            t.call("root appends", append_file, t.p("f%o" % mode), b"y")
            t.stat("f%o" % mode)
            if mode & 0o4000 == 0:
                # set-group-ID alone, a writer outside the group: the VFS
                # clears it, FUSE's kernel side never asks (docs/testing.md)
                continue
            fd = t.open("f%o" % mode, os.O_WRONLY | os.O_APPEND)
            t.do("nobody writes", write_as_nobody, fd, b"z")
            t.do("fstat", lambda fd: stat.S_IMODE(os.fstat(fd).st_mode), fd)
            t.close(fd)
            t.stat("f%o" % mode)

    def test_write_keeps_or_clears_setid(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (a write by another user)")
        log = self.assertParity(self.scenario)
        self.assertIn(("stat f2644", ("ok", {"type": "reg", "mode": "0o2644", "nlink": 1,
                                              "uid": 0, "gid": 0, "size": 2})), log)
        self.assertIn(("fstat", ("ok", 0o777)), log)  # nobody's write: both cleared
        self.assertIn(("fstat", ("ok", 0o766)), log)  # and without group-execute

    def test_write_keeps_or_clears_setid_no_passthrough(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (a write by another user)")
        self.m.stop()
        self.m = self.mount(opts=("passthrough=off", "allow_other", "default_permissions"))
        self.mnt = self.m.mnt
        self.assertParity(self.scenario)


class TestBlocksAndTimes(MountedTestCase):
    def test_st_blocks(self):
        p = self.m.path("f")
        write_file(p, b"")
        self.assertEqual(os.stat(p).st_blocks, 0)
        write_file(p, pattern(MiB))
        b = os.stat(p).st_blocks * 512
        self.assertGreaterEqual(b, MiB)
        self.assertLessEqual(b, MiB + 64 * 1024)
        s = self.m.path("sparse")
        fd = os.open(s, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.ftruncate(fd, 1 << 30)
            os.pwrite(fd, b"x" * 4096, 512 * MiB)
        finally:
            os.close(fd)
        st = os.stat(s)
        self.assertEqual(st.st_size, 1 << 30)
        self.assertGreater(st.st_blocks, 0)
        self.assertLessEqual(st.st_blocks * 512, MiB, "sparse file reports allocated holes")

    def test_mtime_ctime_on_write(self):
        p = self.m.path("f")
        write_file(p, b"x")
        os.utime(p, ns=(10**9, 10**9))
        ct0 = os.stat(p).st_ctime_ns
        wait_clock_advance()
        t0 = time.time_ns()
        with open(p, "r+b") as f:
            f.write(b"y")
        st = os.stat(p)
        self.assertGreaterEqual(st.st_mtime_ns, t0 - 50_000_000)
        self.assertLessEqual(st.st_mtime_ns, time.time_ns() + 50_000_000)
        self.assertGreater(st.st_ctime_ns, ct0)
        # truncate via open(O_TRUNC) updates mtime too
        os.utime(p, ns=(10**9, 10**9))
        os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
        self.assertGreater(os.stat(p).st_mtime_ns, 10**9)

    def test_ctime_on_chmod(self):
        p = self.m.path("f")
        write_file(p, b"x")
        st0 = os.stat(p)
        wait_clock_advance()
        os.chmod(p, 0o600)
        st1 = os.stat(p)
        self.assertGreater(st1.st_ctime_ns, st0.st_ctime_ns)
        self.assertEqual(st1.st_mtime_ns, st0.st_mtime_ns)
        wait_clock_advance()
        os.setxattr(p, "user.t", b"1")
        self.assertGreater(os.stat(p).st_ctime_ns, st1.st_ctime_ns)

    def test_dir_mtime_on_entry_change(self):
        d = self.m.path("d")
        os.mkdir(d)
        for action in (lambda: write_file(os.path.join(d, "f"), b""),
                       lambda: os.rename(os.path.join(d, "f"), os.path.join(d, "g")),
                       lambda: os.unlink(os.path.join(d, "g")),
                       lambda: os.mkdir(os.path.join(d, "s"))):
            os.utime(d, ns=(10**9, 10**9))
            action()
            self.assertGreater(os.stat(d).st_mtime_ns, 10**9)


class TestHotDir(MountedTestCase):
    def test_hot_dir_mode_0700(self):
        st = os.stat(self.m.hot_dir)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertEqual(st.st_uid, os.getuid())

    def test_only_inode_named_files(self):
        write_file(self.m.path("secret-name"), b"s" * 10000)
        os.mkdir(self.m.path("secret-dir"))
        write_file(self.m.path("secret-dir", "secret-inner"), b"i" * 5000)
        os.symlink("secret-name", self.m.path("secret-link"))
        os.mkfifo(self.m.path("secret-fifo"))
        os.rename(self.m.path("secret-name"), self.m.path("secret-renamed"))
        bad = []
        for root, dirs, files in os.walk(self.m.hot_dir):
            for n in dirs + files:
                full = os.path.join(root, n)
                if n in DAEMON_FILES and root == self.m.hot_dir:
                    continue
                if "secret" in n or not re.fullmatch(r"[0-9]+", n):
                    bad.append(full)
                elif not stat.S_ISREG(os.lstat(full).st_mode):
                    bad.append(full + " (not a regular file)")
        self.assertEqual(bad, [])
        # the hot file is named by the inode number the mount reports
        inos = [int(n) for n in self.m.hot_files()]
        for rel in ("secret-renamed", "secret-dir/secret-inner"):
            self.assertIn(os.stat(self.m.path(rel)).st_ino, inos, rel)

    def test_hot_file_removed_on_unlink(self):
        p = self.m.path("f")
        write_file(p, pattern(MiB))
        ino = os.stat(p).st_ino
        names = [n for n in self.m.hot_files() if int(n) == ino]
        self.assertEqual(len(names), 1, "no hot file for inode %d: %s" % (ino, self.m.hot_files()))
        with open(os.path.join(self.m.hot_dir, names[0]), "rb") as f:
            self.assertTrue(f.read() == pattern(MiB), "hot file content differs")
        os.unlink(p)
        harness.wait_until(lambda: names[0] not in os.listdir(self.m.hot_dir), 5,
                           "hot file %s to be removed after unlink" % names[0])


if __name__ == "__main__":
    harness.main()
