#!/usr/bin/env python3
"""
test_durability - spillway's journal and checkpoints on real mounts: what
survives a clean unmount, a kill -9 of the daemon, and a reboot (hot_dir
wiped).

1. Clean remount (and kill -9 remount) of a tree with files of several sizes
   (bigger than chunk_size, spilled, partly spilled, hot only, sparse), dirs,
   symlinks, hard links, a fifo, a device node, xattrs, chmod/chown/utime:
   a full walk (names, types, modes, owners, sizes, mtimes, ctimes, link
   counts, hard-link groups, xattrs, sha256 of every file) is identical.
2. Crash rounds: a writer process (this file run with --crash-writer)
   creates, appends, fsyncs, renames and deletes files in the mount and logs
   to a manifest outside the mount what each call returned; the daemon is
   killed with SIGKILL at a seeded random moment (or as a spill, a
   checkpoint or a GC is seen on disk), the dead mount is lazily unmounted
   and the filesystem remounted with the same options: every acknowledged
   write, close, fsync, rename and unlink is there, byte for byte, across
   rounds.
3. Reboot: hot_dir wiped after a keep_hot unmount or a kill -9: fsync'd and
   spilled files come back intact, files with RAM-only data are gone and
   reported (a warning naming each, stats "lost_files"). (A plain unmount
   spills everything first: test_ram_back.py.)
4. A second daemon on the same state_dir is refused (one line, exit 1).
5. state_dir=none (and no cold tier at all): a remount is empty.

Knobs (environment):
  SPW_CRASH_ROUNDS=N   crash rounds (default 20)
  SPW_CRASH_SEED=N     seed for the writer and the kill moments (default 1)
  SPW_CRASH_FRESH=N    start from an empty filesystem every N rounds (default 10)

Run: python3 test_durability.py --build BUILD_DIR [-k pattern]
"""

import ctypes
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import CrashMount, DurCase  # noqa: E402
from lib.data import (KiB, MiB, PAGE, content, first_diff, open_uncached,  # noqa: E402
                      sha_file, write_content)
from lib.tier import cold_scan, segments_in, stats_of, temps_in  # noqa: E402

# --------------------------------------------------------------------------
# a full description of a tree, for before/after comparisons


def _xattrs(path, follow):
    try:
        names = os.listxattr(path, follow_symlinks=follow)
    except OSError as e:
        return "err " + errno.errorcode.get(e.errno, str(e.errno))
    out = {}
    for n in sorted(names):
        if n.startswith("user.spillway."):
            continue
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=follow).hex()
        except OSError as e:
            out[n] = "err " + errno.errorcode.get(e.errno, str(e.errno))
    return out


def sha_of(path):
    return "%s/%d" % sha_file(path)


def walk_tree(root):
    """{relative path: description}; hard links are described by the sorted
    list of names sharing the inode ("links")."""
    desc = {}
    by_ino = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(dirnames + filenames):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            d = harness.stat_summary(st)
            d["mtime_ns"] = st.st_mtime_ns
            d["ctime_ns"] = st.st_ctime_ns
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                d["rdev"] = st.st_rdev
            if stat.S_ISLNK(st.st_mode):
                d["target"] = os.readlink(p)
            else:
                d["xattrs"] = _xattrs(p, True)
            if stat.S_ISREG(st.st_mode):
                d["sha"] = sha_of(p)
                by_ino.setdefault(st.st_ino, []).append(rel)
                d["_ino"] = st.st_ino
            desc[rel] = d
    for rel, d in desc.items():
        ino = d.pop("_ino", None)
        if ino is not None and len(by_ino[ino]) > 1:
            d["links"] = sorted(by_ino[ino])
    return desc


def diff_trees(a, b):
    lines = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            lines.append("+ %s: %s (appeared)" % (k, b[k]))
        elif k not in b:
            lines.append("- %s: %s (vanished)" % (k, a[k]))
        elif a[k] != b[k]:
            for f in sorted(set(a[k]) | set(b[k])):
                if a[k].get(f) != b[k].get(f):
                    lines.append("! %s: %s was %r, now %r" % (k, f, a[k].get(f), b[k].get(f)))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# 1. clean remount / kill -9 remount of a rich tree


def build_tree(t, root):
    """Files of several sizes and residencies, and every kind of metadata."""
    p = lambda *a: os.path.join(root, *a)  # noqa: E731
    # large, overflowing the hot tier together with the rest (first, so the
    # residencies set up below are still there at the end)
    write_content(p("big"), 8, 40 * MiB + 7)
    write_content(p("big2"), 9, 30 * MiB)
    os.makedirs(p("a", "b", "c"))
    os.mkdir(p("empty"), 0o700)
    os.mkdir(p("sticky"))
    os.chmod(p("sticky"), 0o1777)
    # files: hot only
    open(p("zero"), "wb").close()
    write_content(p("one"), 1, 1)
    write_content(p("a", "page1"), 2, PAGE + 1)
    write_content(p("a", "b", "three_chunks"), 3, 3 * MiB + MiB // 2)
    # spilled whole (cold only)
    write_content(p("a", "spilled20"), 4, 20 * MiB + 123)
    t.evict(p("a", "spilled20"))
    # spilled, then the middle chunk rewritten (cold + hot dirty)
    write_content(p("a", "b", "mixed"), 5, 8 * MiB)
    t.evict(p("a", "b", "mixed"))
    fd = os.open(p("a", "b", "mixed"), os.O_WRONLY)
    os.pwrite(fd, b"M" * 5000, 3 * MiB + 100)
    os.close(fd)
    st = t.state(p("a", "b", "mixed"))  # restore=open brings the rest back
    t.assertGreater(st["segments"], 0, st)
    t.assertGreater(st["dirty"], 0, st)
    # spilled then read back (hot clean)
    write_content(p("a", "b", "c", "warm"), 6, 6 * MiB)
    t.evict(p("a", "b", "c", "warm"))
    os.setxattr(p("a", "b", "c", "warm"), "user.spillway.warm", b"1")
    # sparse, spilled
    fd = os.open(p("sparse"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.ftruncate(fd, 10 * MiB)
    os.pwrite(fd, content(7, 5 * MiB, 4096), 5 * MiB)
    os.close(fd)
    t.evict(p("sparse"))
    # links
    os.symlink("a/b/three_chunks", p("sym"))
    os.symlink("/does/not/exist", p("a", "dangling"))
    os.link(p("a", "page1"), p("a", "b", "c", "hard"))
    os.link(p("a", "page1"), p("hard2"))
    os.mkfifo(p("fifo"), 0o640)
    os.mknod(p("chardev"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    # xattrs
    os.setxattr(p("one"), "user.k1", b"v1")
    os.setxattr(p("one"), "user.empty", b"")
    os.setxattr(p("one"), "user.bin", bytes(range(256)))
    os.setxattr(p("a", "spilled20"), "user.big", b"x" * 3000)
    os.setxattr(p("a"), "user.dirattr", b"on a dir")
    os.setxattr(p("a", "page1"), "user.shared", b"all names see it")
    os.setxattr(p("one"), "user.gone", b"removed")
    os.removexattr(p("one"), "user.gone")
    # modes, owners, times
    os.chmod(p("one"), 0o600)
    os.chmod(p("a", "b", "three_chunks"), 0o4755)
    os.chmod(p("a", "b"), 0o750)
    os.chown(p("one"), 1234, 5678)
    os.chown(p("a", "b", "c"), 4321, 8765)
    os.chown(p("sym"), 77, 88, follow_symlinks=False)
    # renamed and deleted
    write_content(p("a", "tmpname"), 10, 2 * MiB)
    os.rename(p("a", "tmpname"), p("a", "b", "renamed"))
    write_content(p("deleted"), 11, 5 * MiB)
    t.evict(p("deleted"))
    os.unlink(p("deleted"))
    write_content(p("a", "b", "c", "deleted_hot"), 12, 100)
    os.unlink(p("a", "b", "c", "deleted_hot"))
    # times last (each op above may have touched the parents)
    os.utime(p("one"), ns=(1_000_000_123, 1_500_000_000_456_789_012))
    os.utime(p("a", "spilled20"), ns=(2_000_000_000_000_000_001, 1_234_567_890_123_456_789))
    os.utime(p("sym"), ns=(3_000_000_000, 4_000_000_000), follow_symlinks=False)
    os.utime(p("a", "b"), ns=(5_000_000_000, 6_000_000_007))
    os.utime(p("empty"), ns=(7_000_000_000, 8_000_000_000))


def modify_tree(root):
    """A second generation of changes on a recovered tree."""
    p = lambda *a: os.path.join(root, *a)  # noqa: E731
    fd = os.open(p("a", "spilled20"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, content(20, 0, 3 * MiB))
    os.close(fd)
    os.unlink(p("big2"))
    os.rename(p("a", "b", "three_chunks"), p("empty", "moved"))
    os.unlink(p("hard2"))
    write_content(p("new_after_remount"), 21, 9 * MiB)
    os.setxattr(p("one"), "user.k1", b"replaced")
    os.truncate(p("big"), 12 * MiB + 5)
    os.mkdir(p("a", "newdir"))
    os.utime(p("a", "newdir"), ns=(9_000_000_000, 9_100_000_000))


class TestRemount(DurCase):
    timeout = 180

    def roundtrip(self, how):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        m = self.cmount(hot, opts, "first")
        build_tree(self, m.mnt)
        st = self.state(m.path("a", "spilled20"))
        self.assertEqual((st["hot"], st["cold"]), (0, 21), "spilled20 not cold: %s" % st)
        self.assertGreater(stats_of(m.mnt)["spilled"]["bytes"], 0)
        self.assertTrue(segments_in(cold), "nothing spilled to %s" % cold)
        before = walk_tree(m.mnt)
        # the walk read everything back: make the spilled ones cold again
        for rel in (("a", "spilled20"), ("sparse",)):
            self.evict(m.path(*rel))
            self.assertEqual(self.state(m.path(*rel))["hot"], 0)
        s0 = stats_of(m.mnt)
        self.down(m, how)

        m2 = self.cmount(hot, opts, "second")
        after = walk_tree(m2.mnt)
        d = diff_trees(before, after)
        if d:
            self.fail("tree differs after %s + remount:\n%s\n--- log ---\n%s"
                      % (how, d, m2.log_text(30)))
        s1 = stats_of(m2.mnt)
        self.assertEqual((s1["files"], s1["inodes"]), (s0["files"], s0["inodes"]),
                         "file/inode counts changed: %s -> %s" % (s0, s1))
        self.assertEqual(s1.get("lost_files"), 0, json.dumps(s1))

        # a second generation of changes on the recovered tree, and again
        modify_tree(m2.mnt)
        before2 = walk_tree(m2.mnt)
        self.evict(m2.path("a", "spilled20"))
        self.down(m2, how)
        m3 = self.cmount(hot, opts, "third")
        d = diff_trees(before2, walk_tree(m3.mnt))
        if d:
            self.fail("tree differs after changes on the recovered tree, %s + remount:\n%s\n"
                      "--- log ---\n%s" % (how, d, m3.log_text(30)))
        self.assertEqual(stats_of(m3.mnt).get("lost_files"), 0)
        return m3, hot, cold, state

    def down(self, m, how):
        if how == "unmount":
            rc = m.unmount_clean()
            self.assertEqual(rc, 0, "daemon exit status after a clean unmount\n%s"
                             % m.log_text(20))
        else:
            m.kill9()

    def test_clean_remount_identical(self):
        m, hot, cold, state = self.roundtrip("unmount")
        # the state directory as documented
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o700)
        names = os.listdir(state)
        self.assertIn("lock", names)
        self.assertIn("tiers", names)
        self.assertTrue([n for n in names if re.fullmatch(r"checkpoint\.[0-9a-f]{16}", n)],
                        names)
        with open(os.path.join(state, "tiers")) as f:
            kv = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
        self.assertEqual(kv.get("nvme"), cold, kv)
        self.assertTrue(re.fullmatch(r"[0-9a-f]{32}", kv.get("uuid", "")), kv)
        self.assertIn(kv.get("chunk_size"), ("1M", str(MiB)), kv)

    def test_kill9_remount_identical(self):
        self.roundtrip("kill9")

    def test_kill9_after_writing_over_spilled_chunks(self):
        """Chunks spilled (fsync) and still in RAM, then written all over or
        truncated: the journal says dirty, not the old location. It named the old location once,
        and GC deleted the old segment once every chunk in it was written:
        after a kill -9 the files' chunks were in a segment that was gone
        (EIO), or the old bytes came back (found with fsstress)."""
        hot, cold, state = self.make_state()
        # through the daemon (a passthrough writer keeps the copy: index.h)
        m = self.cmount(hot, self.opts(cold, state, passthrough="off"), "first")
        names = ["f%d" % i for i in range(4)]
        for i, n in enumerate(names):
            write_content(m.path(n), 10 + i, 2 * MiB)
            fd = os.open(m.path(n), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        segs = set(segments_in(cold))
        self.assertTrue(segs)
        for i, n in enumerate(names):
            st = self.state(m.path(n))  # spilled, still in RAM
            self.assertEqual((st["hot"], st["dirty"]), (2, 0), st)
            self.assertGreaterEqual(st["segments"], 1, st)
            # chunk 0 written all over, chunk 1 cut and grown back (truncate
            # makes the boundary chunk dirty): old copies let go
            fd = os.open(m.path(n), os.O_WRONLY)
            os.pwrite(fd, content(20 + i, 0, MiB), 0)
            os.ftruncate(fd, MiB + 4096)
            os.ftruncate(fd, 2 * MiB)
            os.close(fd)
        # the old segments die and GC deletes them (journal synced first)
        harness.wait_until(lambda: not segs & set(segments_in(cold)), 30,
                           "GC deleted the written-over segments %s" % sorted(segs))
        m.kill9()
        m2 = self.cmount(hot, self.opts(cold, state, passthrough="off"), "second")
        for i, n in enumerate(names):
            exp = (content(20 + i, 0, MiB) + content(10 + i, MiB, 4096)
                   + bytes(MiB - 4096))
            fd = open_uncached(m2.path(n))
            try:
                got = os.pread(fd, 4 * MiB, 0)
            except OSError as e:
                self.fail("%s unreadable after kill -9 + remount: %s\n%s"
                          % (n, e, m2.log_text(20)))
            finally:
                os.close(fd)
            if got != bytes(exp):
                d = first_diff(got, bytes(exp))
                self.fail("%s differs from offset %s after kill -9 + remount\n%s"
                          % (n, d, m2.log_text(20)))
        self.assertEqual(stats_of(m2.mnt).get("lost_files"), 0)

    def test_default_state_dir_under_first_nvme(self):
        hot, cold, _ = self.make_state()
        cold2 = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, cold2, True)
        o = ["chunk_size=1M", "nvme=%s:%s" % (cold, cold2), "min_spill_size=4M"]
        m = self.cmount(hot, o, "first")
        write_content(m.path("f"), 30, 6 * MiB)
        self.evict(m.path("f"))
        write_content(m.path("g"), 31, 100)
        sd = os.path.join(cold, ".spillway")
        self.assertTrue(os.path.isdir(sd), "no state dir %s: %s" % (sd, os.listdir(cold)))
        self.assertEqual(stat.S_IMODE(os.stat(sd).st_mode), 0o700)
        self.assertFalse(os.path.exists(os.path.join(cold2, ".spillway")))
        self.assertEqual(m.unmount_clean(), 0)
        m2 = self.cmount(hot, o, "second")
        self.assertContent(m2.path("f"), 30, 6 * MiB)
        self.assertContent(m2.path("g"), 31, 100)


# --------------------------------------------------------------------------
# 2. crash rounds
#
# The writer logs one line per event to the manifest (O_APPEND, one write
# each, so a SIGKILL never tears a line):
#   W path tag        about to create path (O_EXCL)      O path   open returned
#   A path end        a write returned; the file now holds [0, end) of stream tag
#   S path size sha   fsync(file) and fsync(parent dir) returned
#   C path size sha   close returned
#   P path tag size   about to reopen path to append (size: its size now)
#   U path / u path   about to unlink / unlink returned
#   N old new / n old new   about to rename / rename returned
#   K dir / k dir     about to mkdir / mkdir returned
#   E errno path      a call failed: the writer stops

CRASH_ROUNDS = int(os.environ.get("SPW_CRASH_ROUNDS", "20"))
CRASH_SEED = int(os.environ.get("SPW_CRASH_SEED", "1"))
CRASH_FRESH = int(os.environ.get("SPW_CRASH_FRESH", "10"))
LIVE_BUDGET = 120 * MiB  # live bytes the writer keeps in the filesystem (about)
MAX_BS = MiB + 4097  # largest single write


def crash_writer(argv):
    """Entry point of the writer process (this file --crash-writer ...)."""
    a = dict(zip(argv[0::2], argv[1::2]))
    mnt, manifest = a["--mnt"], a["--manifest"]
    rnd, seed = int(a["--round"]), int(a["--seed"])
    with open(a["--state"]) as f:
        st = json.load(f)
    files = {p: (v["tag"], v["size"]) for p, v in st["files"].items()}
    dirs = list(st["dirs"])
    rng = random.Random(seed * 1000003 + rnd)
    mfd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tag_next = rnd * 100000 + 1
    serial = 0

    def M(*f):
        os.write(mfd, (" ".join(str(x) for x in f) + "\n").encode())

    def P(rel):
        return os.path.join(mnt, rel)

    def fsync_dir(rel):
        dfd = os.open(P(os.path.dirname(rel)) if os.path.dirname(rel) else mnt, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def write_to(rel, fd, tag, start, size, h):
        sizes = [MiB, MiB, 256 * KiB, MAX_BS, 128 * KiB - 1]
        bs = rng.choice(sizes + [4096] if size - start <= 2 * MiB else sizes)
        off = start
        while off < size:
            n = min(bs, size - off)
            data = content(tag, off, n)
            w = os.write(fd, data)
            if w != n:
                raise OSError(errno.EIO, "short write %d of %d" % (w, n))
            h.update(data)
            off += n
            M("A", rel, off)

    def new_name(d):
        nonlocal serial
        serial += 1
        return os.path.join(d, "r%02d_%05d" % (rnd, serial)) if d else "r%02d_%05d" % (rnd,
                                                                                        serial)

    def pick_size():
        r = rng.random()
        if r < 0.35:
            return rng.randint(0, 64 * KiB)
        if r < 0.65:
            return rng.randint(64 * KiB, 2 * MiB)
        if r < 0.88:
            return rng.randint(2 * MiB, 12 * MiB)
        return rng.randint(17 * MiB, 24 * MiB)  # > hot_size/4

    path = None
    try:
        for d in ("d0", "d1", "d2", "d3"):
            if d not in dirs:
                path = d
                M("K", d)
                os.mkdir(P(d))
                M("k", d)
                dirs.append(d)
        while True:
            live = sum(s for _, s in files.values())
            r = rng.random()
            if live > LIVE_BUDGET or len(files) > 300:
                op = "unlink" if r < 0.7 else "rename" if r < 0.8 else "create"
            else:
                op = ("create" if r < 0.58 else "append" if r < 0.66 else
                      "unlink" if r < 0.82 else "rename" if r < 0.97 else "mkdir")
            if op in ("append", "unlink", "rename") and not files:
                op = "create"
            if op == "create":
                path = new_name(rng.choice(dirs + [""]))
                tag = tag_next
                tag_next += 1
                size = pick_size()
                M("W", path, tag)
                fd = os.open(P(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                M("O", path)
                h = hashlib.sha256()
                write_to(path, fd, tag, 0, size, h)
                if rng.random() < 0.35:
                    os.fsync(fd)
                    fsync_dir(path)
                    M("S", path, size, h.hexdigest())
                os.close(fd)
                M("C", path, size, h.hexdigest())
                files[path] = (tag, size)
            elif op == "append":
                path = rng.choice(sorted(files))
                tag, size = files[path]
                add = rng.randint(1, 3 * MiB)
                h = hashlib.sha256()
                for off in range(0, size, 4 * MiB):
                    h.update(content(tag, off, min(4 * MiB, size - off)))
                M("P", path, tag, size)
                fd = os.open(P(path), os.O_WRONLY | os.O_APPEND)
                M("O", path)
                write_to(path, fd, tag, size, size + add, h)
                if rng.random() < 0.35:
                    os.fsync(fd)
                    fsync_dir(path)
                    M("S", path, size + add, h.hexdigest())
                os.close(fd)
                M("C", path, size + add, h.hexdigest())
                files[path] = (tag, size + add)
            elif op == "unlink":
                path = rng.choice(sorted(files))
                M("U", path)
                os.unlink(P(path))
                M("u", path)
                del files[path]
            elif op == "rename":
                path = rng.choice(sorted(files))
                new = new_name(rng.choice(dirs + [""]))
                M("N", path, new)
                os.rename(P(path), P(new))
                M("n", path, new)
                files[new] = files.pop(path)
            else:
                path = new_name(rng.choice(dirs))
                M("K", path)
                os.mkdir(P(path))
                M("k", path)
                dirs.append(path)
    except OSError as e:
        M("E", e.errno, path)
        sys.exit(3)


def link_fd(fd, path):
    """linkat(2) of an open file to path (AT_SYMLINK_FOLLOW on /proc's link)."""
    libc = harness.libc
    libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_int]
    if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, os.fsencode(path), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


class TestTmpfileLinked(DurCase):
    """An O_TMPFILE file spilled, then a checkpoint while it has no name
    (it leaves such files out), then linkat and fsync, then kill -9: the
    file is back whole. Its name once pointed at nothing after the replay."""

    def test_linked_after_checkpoint_survives_kill(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, checkpoint_size="64K")
        m = self.cmount(hot, opts, "first")
        data = os.urandom(3 * MiB)
        fd = os.open(m.mnt, os.O_TMPFILE | os.O_RDWR, 0o640)
        try:
            os.pwrite(fd, data, 0)
            os.setxattr(fd, "user.spillway.evict", b"1")
            ckpts = {n for n in os.listdir(state) if n.startswith("checkpoint.")}
            # journal records past checkpoint_size: a checkpoint follows
            os.mkdir(m.path("many"))
            for i in range(2000):
                os.mkdir(m.path("many", "d%04d" % i))
                if {n for n in os.listdir(state) if n.startswith("checkpoint.")} - ckpts:
                    break
            self.assertTrue({n for n in os.listdir(state) if n.startswith("checkpoint.")} - ckpts,
                            "no checkpoint while the tmpfile had no name")
            link_fd(fd, m.path("named"))
            os.fsync(fd)
            dfd = os.open(m.mnt, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        finally:
            os.close(fd)
        m.kill9()
        m.stop()
        m2 = self.cmount(hot, opts, "second")
        with open(m2.path("named"), "rb") as f:
            self.assertTrue(f.read() == data, "named differs after kill -9 + remount")
        self.assertEqual(stat.S_IMODE(os.stat(m2.path("named")).st_mode), 0o640)


class Model:
    """What the manifest says must (or may) be in the filesystem."""

    def __init__(self):
        self.files = {}  # path -> {"tag", "size", "sha"}: closed, exact
        self.dirs = set()
        self.gone = set()  # unlinked or renamed away: must not exist

    def to_json(self):
        return {"files": {p: {"tag": v["tag"], "size": v["size"]}
                          for p, v in self.files.items()}, "dirs": sorted(self.dirs)}


def replay(model, lines):
    """Apply a round's manifest to the model. Returns (pending, open_files,
    fsynced, writes, error): pending is the one call that may or may not have
    happened; open_files maps path -> {tag, acked, base, created}."""
    pending = None
    open_files = {}
    fsynced = {}
    writes = 0
    error = None
    for ln in lines:
        f = ln.split()
        if not f:
            continue
        k = f[0]
        if k == "W":
            pending = ("create", f[1], int(f[2]))
        elif k == "O":
            if pending and pending[0] == "create":
                open_files[f[1]] = {"tag": pending[2], "acked": 0, "base": 0, "created": True}
            else:
                v = model.files.pop(f[1])
                open_files[f[1]] = {"tag": v["tag"], "acked": v["size"], "base": v["size"],
                                    "created": False}
            pending = None
        elif k == "A":
            open_files[f[1]]["acked"] = int(f[2])
            writes += 1
        elif k == "S":
            fsynced[f[1]] = (int(f[2]), f[3])
        elif k == "C":
            o = open_files.pop(f[1])
            model.files[f[1]] = {"tag": o["tag"], "size": int(f[2]), "sha": f[3]}
        elif k == "P":
            pending = ("append", f[1], int(f[2]), int(f[3]))
        elif k == "U":
            pending = ("unlink", f[1])
        elif k == "u":
            del model.files[f[1]]
            model.gone.add(f[1])
            pending = None
        elif k == "N":
            pending = ("rename", f[1], f[2])
        elif k == "n":
            model.files[f[2]] = model.files.pop(f[1])
            model.gone.add(f[1])
            pending = None
        elif k == "K":
            pending = ("mkdir", f[1])
        elif k == "k":
            model.dirs.add(f[1])
            pending = None
        elif k == "E":
            error = ln
        else:
            raise AssertionError("bad manifest line %r" % ln)
    return pending, open_files, fsynced, writes, error


class TestCrash(DurCase):
    timeout = 420

    def test_kill9_rounds(self):
        t_start = time.monotonic()
        rng = random.Random(CRASH_SEED)
        tmp = self.tmpdir()
        self.writer = None
        self.deferred = []
        self.addCleanup(self._kill_writer)
        model = None
        totals = {"writes": 0, "bytes_closed": 0, "fsynced": 0, "unlinks": 0, "renames": 0,
                  "segments_seen": 0, "kills": {}, "spill_kills": 0, "checkpoints_seen": 0,
                  "gc_seen": 0, "max_segments": 0}
        m = None
        hot = cold = None
        for rnd in range(CRASH_ROUNDS):
            if rnd % CRASH_FRESH == 0:
                if m is not None:
                    self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
                    m.stop()
                hot, cold, _ = self.make_state()
                model = Model()
                opts = self.opts(cold, None, journal_sync_ms="100", checkpoint_size="64K",
                                 write_wait="30s")
                m = self.cmount(hot, opts, "r%02d" % rnd)
            self.ctx = "seed %d round %d" % (CRASH_SEED, rnd)
            m = self.crash_round(rnd, rng, m, model, hot, cold, opts, tmp, totals)
        # and a clean unmount + remount at the end: everything is still there
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        m = self.cmount(hot, opts, "final")
        self.verify(m, model, None, {}, {}, "final clean remount")
        elapsed = time.monotonic() - t_start
        sys.stderr.write("\n  [crash] seed %d, %d rounds in %.0fs: %s\n"
                         % (CRASH_SEED, CRASH_ROUNDS, elapsed, json.dumps(totals)))
        # no vacuous pass
        self.assertGreater(totals["writes"], 50 * CRASH_ROUNDS // 10,
                           "the writer hardly made progress: %s" % totals)
        # 10 MiB a round (200 MiB in the default 20): the rounds are timed,
        # so a short run on a sanitizer build (4 under TSan, tests/tsan.sh)
        # closes less
        self.assertGreater(totals["bytes_closed"], 10 * MiB * CRASH_ROUNDS, totals)
        self.assertGreater(totals["fsynced"], 0, totals)
        self.assertGreater(totals["unlinks"], 0, totals)
        self.assertGreater(totals["renames"], 0, totals)
        self.assertGreater(totals["segments_seen"], 0, "no spill happened: %s" % totals)
        self.assertGreater(totals["spill_kills"], 0, "no kill landed during a spill: %s"
                           % totals)
        self.assertGreater(totals["checkpoints_seen"], 0,
                           "no checkpoint seen during the runs: %s" % totals)
        if self.deferred:
            self.fail("%d round(s) left cold-tier files behind:\n%s"
                      % (len(self.deferred), "\n".join(self.deferred)))

    def _kill_writer(self):
        w = self.writer
        if w is not None and w.poll() is None:
            os.kill(w.pid, signal.SIGKILL)
            w.wait()

    def crash_round(self, rnd, rng, m, model, hot, cold, opts, tmp, totals):
        manifest = os.path.join(tmp, "manifest.%02d" % rnd)
        statef = os.path.join(tmp, "state.%02d.json" % rnd)
        with open(statef, "w") as f:
            json.dump(model.to_json(), f)
        wlog = open(os.path.join(tmp, "writer.%02d.log" % rnd), "wb")
        state_dir = os.path.join(cold, ".spillway")
        segs0 = segments_in(cold)
        state0 = set(os.listdir(state_dir))
        mode = rng.choice(["timer", "timer", "spill", "spill", "checkpoint", "gc"])
        self.writer = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--crash-writer", "--mnt", m.mnt,
             "--manifest", manifest, "--state", statef, "--round", str(rnd),
             "--seed", str(CRASH_SEED)],
            stdin=subprocess.DEVNULL, stdout=wlog, stderr=wlog,
            preexec_fn=harness._pdeathsig, start_new_session=True)
        wlog.close()

        def manifest_lines():
            try:
                with open(manifest) as f:
                    return f.read().splitlines()
            except FileNotFoundError:
                return []

        def writer_check():
            if self.writer.poll() is not None:
                self.fail("%s: the writer stopped before the kill (status %s): %s\n"
                          "--- writer log ---\n%s\n--- daemon log ---\n%s"
                          % (self.ctx, self.writer.returncode, manifest_lines()[-3:],
                             harness.log_tail(wlog.name, 20), m.log_text(30)))

        # the writer is running (it wrote something) before the clock starts
        deadline = time.monotonic() + 20
        while not any(ln.startswith("A ") for ln in manifest_lines()):
            writer_check()
            self.assertLess(time.monotonic(), deadline, "%s: writer made no write" % self.ctx)
            time.sleep(0.005)
        seen = set(segs0)
        state_seen = set(state0)
        event = None
        if mode == "timer":
            end = time.monotonic() + rng.uniform(0.05, 2.5)
            while time.monotonic() < end:
                writer_check()
                seen |= set(segments_in(cold))
                state_seen |= set(os.listdir(state_dir))
                time.sleep(0.01)
        else:
            end = time.monotonic() + rng.uniform(0.0, 1.0)
            while time.monotonic() < end:
                writer_check()
                time.sleep(0.01)
            deadline = time.monotonic() + 8
            prev = segments_in(cold)
            while time.monotonic() < deadline and event is None:
                cur = cold_scan(cold)
                snames = set(os.listdir(state_dir))
                state_seen |= snames
                segs = {p for p in cur if os.path.basename(p).startswith("seg-")}
                seen |= segs
                if mode == "spill" and any(os.path.basename(p).startswith(".tmp") for p in cur):
                    event = "spill"
                elif mode == "checkpoint" and snames - state0:
                    event = "checkpoint"
                elif mode == "gc" and set(prev) - segs:
                    event = "gc"
                prev = segs
                if event is None:
                    writer_check()
                    time.sleep(0.001)
        # SIGKILL the daemon first, then the writer
        m.kill9()
        if self.writer.poll() is None:
            try:
                self.writer.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                os.kill(self.writer.pid, signal.SIGKILL)
                self.writer.wait()
        self.writer = None
        state_seen |= set(os.listdir(state_dir))
        totals["checkpoints_seen"] += len([n for n in state_seen - state0
                                           if n.startswith("checkpoint.")])
        kind = event or (mode if mode == "timer" else mode + "-timeout")
        totals["kills"][kind] = totals["kills"].get(kind, 0) + 1
        if event == "spill":
            totals["spill_kills"] += 1
        if event == "gc":
            totals["gc_seen"] += 1
        totals["segments_seen"] += len(seen - set(segs0))
        m.stop()

        lines = manifest_lines()
        pending, open_files, fsynced, writes, error = replay(model, lines)
        totals["writes"] += writes
        totals["fsynced"] += len(fsynced)
        totals["unlinks"] += sum(1 for ln in lines if ln.startswith("u "))
        totals["renames"] += sum(1 for ln in lines if ln.startswith("n "))
        totals["bytes_closed"] += sum(int(ln.split()[2]) for ln in lines if ln.startswith("C "))
        self.assertGreater(writes, 0, "%s: no write acknowledged" % self.ctx)

        m2 = CrashMount(hot, opts, "r%02d-recovered" % rnd)
        try:
            m2.start()
        except harness.MountError as e:
            self.fail("%s (kill: %s): remount after kill -9 failed: %s\n--- killed daemon ---\n%s"
                      % (self.ctx, kind, e, m.log_text(30)))
        self.addCleanup(self._stop_mount, m2)
        self.killed_log = m.log
        s = stats_of(m2.mnt)
        totals["max_segments"] = max(totals["max_segments"], s["segments"]["count"])
        # segments written but never journaled are gone, temp files too; the
        # rest are exactly the ones the index knows (GC may still be running)
        # (reported at the end: the data checks go on)
        try:
            harness.wait_until(lambda: not temps_in(cold) and len(segments_in(cold)) ==
                               stats_of(m2.mnt)["segments"]["count"], 3,
                               "segment files on disk == segments in the index", interval=0.05)
        except AssertionError as e:
            self.deferred.append("%s (kill: %s): %s: %d segment files on disk, %d in the index; "
                                 "unfinished segment files left: %s"
                                 % (self.ctx, kind, e, len(segments_in(cold)),
                                    stats_of(m2.mnt)["segments"]["count"], temps_in(cold)))
        self.assertEqual(s.get("lost_files"), 0,
                         "%s: kill -9 (no reboot) lost files: %s\n%s"
                         % (self.ctx, json.dumps(s), m2.log_text(30)))
        try:
            self.verify(m2, model, pending, open_files, fsynced, "after kill (%s)" % kind)
        except AssertionError:
            keep = os.path.join(harness.LOG_DIR, "%s.manifest.%02d"
                                % (harness._current_test[0], rnd))
            shutil.copy(manifest, keep)
            sys.stderr.write("\n[crash] manifest kept in %s\n" % keep)
            raise
        return m2

    def verify(self, m, model, pending, open_files, fsynced, when):
        """Check the mount against the model; then settle the ambiguous files
        (delete half-written ones) so the model is exact again."""
        ctx = "%s, %s" % (getattr(self, "ctx", ""), when)
        mnt = m.mnt
        problems = []

        def exists(rel):
            return os.path.lexists(os.path.join(mnt, rel))

        def check_closed(rel, v, why):
            p = os.path.join(mnt, rel)
            try:
                h, n = sha_file(p)
            except OSError as e:
                problems.append("%s (%s, %d bytes): %s" % (rel, why, v["size"], e))
                return
            if (h, n) != (v["sha"], v["size"]):
                exp = content(v["tag"], 0, v["size"]) if v["size"] <= 32 * MiB else None
                where = ""
                if exp is not None:
                    with open(p, "rb") as f:
                        got = f.read()
                    d = first_diff(got, exp)
                    where = " first difference at %d (zeros there: %s)" % (
                        d, got[d:d + 16].count(0) == min(16, max(0, len(got) - d)))
                problems.append("%s (%s): %d bytes sha %s..., expected %d bytes sha %s...%s"
                                % (rel, why, n, h[:12], v["size"], v["sha"][:12], where))

        # an append in flight before its open returned changed nothing yet
        ambiguous = set()
        if pending is not None and pending[0] == "rename":
            ambiguous = {pending[1], pending[2]}
        elif pending is not None and pending[0] != "append":
            ambiguous = {pending[1]}
        for rel, v in sorted(model.files.items()):
            if rel in ambiguous:
                continue
            why = "fsync'd" if rel in fsynced else "closed"
            if not exists(rel):
                problems.append("%s (%s, %d bytes): missing" % (rel, why, v["size"]))
            else:
                check_closed(rel, v, why)
        for rel, (size, sha) in fsynced.items():
            if rel in open_files and exists(rel):
                # fsync'd, then written further (acknowledged writes after the
                # fsync survive a kill too): the fsync'd prefix must be there
                o = open_files[rel]
                p = os.path.join(mnt, rel)
                with open(p, "rb") as f:
                    got = f.read(size)
                if hashlib.sha256(got).hexdigest() != sha or len(got) != size:
                    exp = content(o["tag"], 0, size)
                    problems.append("%s (fsync'd, not closed): the %d fsync'd bytes differ "
                                    "(first difference at %d)"
                                    % (rel, size, first_diff(got, exp)))
        for rel in sorted(model.gone - ambiguous):
            if exists(rel):
                problems.append("%s: unlinked or renamed away before the kill, but it is back"
                                % rel)
        for d in sorted(model.dirs):
            if not os.path.isdir(os.path.join(mnt, d)):
                problems.append("%s/: directory missing" % d)
        # files being written at the kill: every acknowledged byte is there
        for rel, o in sorted(open_files.items()):
            p = os.path.join(mnt, rel)
            if not exists(rel):
                problems.append("%s (open, %d bytes acknowledged): missing" % (rel, o["acked"]))
                continue
            n = os.stat(p).st_size
            if n < o["acked"] or n > o["acked"] + MAX_BS:
                problems.append("%s (open): size %d, acknowledged %d (in flight <= %d)"
                                % (rel, n, o["acked"], MAX_BS))
            fd = open_uncached(p)
            try:
                for off in range(0, o["acked"], 4 * MiB):
                    k = min(4 * MiB, o["acked"] - off)
                    got = os.pread(fd, k, off)
                    if got != content(o["tag"], off, k):
                        problems.append("%s (open): acknowledged bytes wrong at %d"
                                        % (rel, off + first_diff(got, content(o["tag"], off,
                                                                             k))))
                        break
            except OSError as e:
                problems.append("%s (open): reading acknowledged bytes: %s" % (rel, e))
            finally:
                os.close(fd)
        # the one call that may or may not have happened
        if pending is not None:
            kind = pending[0]
            if kind == "create" and pending[1] not in open_files and exists(pending[1]):
                n = os.stat(os.path.join(mnt, pending[1])).st_size
                if n != 0:
                    problems.append("%s: create in flight, file has %d bytes" % (pending[1], n))
            elif kind == "unlink" and exists(pending[1]):
                check_closed(pending[1], model.files[pending[1]], "unlink in flight")
            elif kind == "rename":
                old, new = pending[1], pending[2]
                eo, en = exists(old), exists(new)
                if eo == en:
                    problems.append("rename %s -> %s in flight: old %s, new %s (must be exactly "
                                    "one)" % (old, new, eo, en))
                else:
                    check_closed(new if en else old, model.files[old], "rename in flight")
        # nothing else
        known = set(model.files) | set(open_files) | ambiguous | model.dirs
        if pending is not None and pending[0] in ("create", "mkdir"):
            known.add(pending[1])
        for dirpath, dirnames, filenames in os.walk(mnt):
            for n in dirnames + filenames:
                rel = os.path.relpath(os.path.join(dirpath, n), mnt)
                if rel not in known:
                    problems.append("%s: exists but the writer never had it there" % rel)
        if problems:
            killed = harness.log_tail(getattr(self, "killed_log", ""), 25)
            self.fail("%s: %d problem(s):\n  %s\n--- killed daemon log ---\n%s\n"
                      "--- recovered daemon log ---\n%s"
                      % (ctx, len(problems), "\n  ".join(problems[:40]), killed,
                         m.log_text(25)))

        # settle: half-written files go; ambiguous calls resolved as observed
        for rel in open_files:
            os.unlink(os.path.join(mnt, rel))
            model.gone.add(rel)
        if pending is not None:
            kind = pending[0]
            if kind == "create" and pending[1] not in open_files:
                if exists(pending[1]):
                    os.unlink(os.path.join(mnt, pending[1]))
                model.gone.add(pending[1])
            elif kind == "unlink" and not exists(pending[1]):
                del model.files[pending[1]]
                model.gone.add(pending[1])
            elif kind == "rename" and exists(pending[2]):
                model.files[pending[2]] = model.files.pop(pending[1])
                model.gone.add(pending[1])
            elif kind == "rename":
                model.gone.add(pending[2])
            elif kind == "mkdir" and exists(pending[1]):
                model.dirs.add(pending[1])
            elif kind == "mkdir":
                model.gone.add(pending[1])


# --------------------------------------------------------------------------
# 3. reboot: hot_dir wiped


class TestReboot(DurCase):
    timeout = 120

    def reboot(self, how):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, min_spill_size="64M")  # no spills but the forced ones
        if how == "unmount":
            # a plain unmount spills everything (test_ram_back.py); with
            # keep_hot the RAM-only data stays in hot_dir and a reboot loses it
            opts.append("keep_hot")
        m = self.cmount(hot, opts, "before")
        p = m.path
        os.mkdir(p("d"))
        keep = {}  # rel -> (tag, size): must come back intact
        lost = []  # rel: data only in RAM
        # fsync'd: written through to the cold tier
        for i, size in enumerate([100, 3 * MiB + 5, 9 * MiB]):
            rel = "d/synced%d" % i
            fd = os.open(p(rel), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, content(40 + i, 0, size))
            os.fsync(fd)
            os.close(fd)
            keep[rel] = (40 + i, size)
        # spilled by evict
        for i, size in enumerate([5000, 6 * MiB]):
            rel = "spilled%d" % i
            write_content(p(rel), 50 + i, size)
            self.evict(p(rel))
            self.assertEqual(self.state(p(rel))["hot"], 0)
            keep[rel] = (50 + i, size)
        # spilled, then read back: hot and clean, the cold copy still counts
        write_content(p("warm"), 60, 4 * MiB)
        self.evict(p("warm"))
        os.setxattr(p("warm"), "user.spillway.warm", b"1")
        keep["warm"] = (60, 4 * MiB)
        # empty: no data anywhere, nothing to lose
        open(p("d/empty"), "wb").close()
        keep["d/empty"] = (0, 0)
        # only in RAM
        for i, size in enumerate([1, 70000, 2 * MiB + 3]):
            rel = "d/hot%d" % i
            write_content(p(rel), 70 + i, size)
            lost.append(rel)
        # fsync'd, then appended to: the new bytes are RAM only
        fd = os.open(p("appended"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, content(80, 0, 2 * MiB))
        os.fsync(fd)
        os.write(fd, content(80, 2 * MiB, 1000))
        os.close(fd)
        lost.append("appended")
        # spilled, then one chunk rewritten in RAM
        write_content(p("partial"), 81, 5 * MiB)
        self.evict(p("partial"))
        fd = os.open(p("partial"), os.O_WRONLY)
        os.pwrite(fd, b"new", 2 * MiB + 7)
        os.close(fd)
        lost.append("partial")
        os.symlink("spilled0", p("link"))
        dfd = os.open(m.mnt, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)

        if how == "unmount":
            self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        else:
            m.kill9()
        m.stop()
        # the reboot: the tmpfs is empty
        if how == "unmount":
            for n in os.listdir(hot):
                os.unlink(os.path.join(hot, n))
        else:
            shutil.rmtree(hot)

        m2 = self.cmount(hot, opts, "after")
        for rel, (tag, size) in sorted(keep.items()):
            self.assertTrue(os.path.exists(m2.path(rel)), "%s missing after the reboot\n%s"
                            % (rel, m2.log_text(30)))
            self.assertContent(m2.path(rel), tag, size, "after the reboot")
        self.assertEqual(os.readlink(m2.path("link")), "spilled0")
        for rel in lost:
            if os.path.lexists(m2.path(rel)):
                self.fail("%s had RAM-only data but is still there after the reboot (size %d)"
                          % (rel, os.lstat(m2.path(rel)).st_size))
        self.assertEqual(sorted(os.listdir(m2.path("d"))),
                         sorted(["synced0", "synced1", "synced2", "empty"]))
        log = m2.log_all()
        for rel in lost:
            hits = [ln for ln in log.splitlines() if "lost" in ln and rel in ln]
            self.assertTrue(hits, "no log line with 'lost' and %s:\n%s" % (rel, m2.log_text(40)))
            self.assertTrue(any(re.search(r"warn", ln, re.I) for ln in hits),
                            "not at warning level: %s" % hits)
        s = stats_of(m2.mnt)
        self.assertEqual(s.get("lost_files"), len(lost), json.dumps(s))
        self.assertEqual(s["files"], len(keep), json.dumps(s))
        # the lost names can be used again
        write_content(m2.path("d/hot0"), 90, 10)
        self.assertContent(m2.path("d/hot0"), 90, 10)
        # and a second remount does not report them again
        self.assertEqual(m2.unmount_clean(), 0, m2.log_text(20))
        m2.stop()
        m3 = self.cmount(hot, opts, "again")
        self.assertEqual(stats_of(m3.mnt).get("lost_files"), 0)
        self.assertContent(m3.path("d/hot0"), 90, 10)
        for rel, (tag, size) in sorted(keep.items()):
            self.assertContent(m3.path(rel), tag, size, "after a second remount")

    def test_reboot_after_unmount_keep_hot(self):
        self.reboot("unmount")

    def test_reboot_after_kill9(self):
        self.reboot("kill9")


# --------------------------------------------------------------------------
# 4. one daemon per state_dir; 5. no journal


class TestStateDir(DurCase):
    timeout = 90

    def test_second_daemon_refused(self):
        hot, cold, state = self.make_state()
        m = self.cmount(hot, self.opts(cold, state), "first")
        write_content(m.path("keep"), 1, 3 * MiB)
        hot2 = os.path.join(self.tmpdir(on_shm=True), "hot")
        cold2 = self.tmpdir()
        mnt2 = self.tmpdir()
        args = ["-f", "-o", "hot_dir=%s,hot_size=64M,chunk_size=1M,nvme=%s,state_dir=%s"
                % (hot2, cold2, state), mnt2]
        rc, out, err, was_mounted = harness.run_spillway(args, mnt2)
        ctx = "spillway %s\nrc=%r\nstdout=%r\nstderr=%r" % (" ".join(args), rc, out, err)
        self.assertFalse(was_mounted, "second daemon mounted\n" + ctx)
        self.assertEqual(rc, 1, ctx)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, "expected one line on stderr\n" + ctx)
        self.assertIn("state_dir", lines[0], ctx)
        self.assertIn(state, lines[0], ctx)
        self.assertFalse(harness.is_mounted(mnt2))
        # the first one is untouched
        self.assertContent(m.path("keep"), 1, 3 * MiB)
        write_content(m.path("more"), 2, 100)
        self.assertEqual(m.unmount_clean(), 0)
        m.stop()
        m2 = self.cmount(hot, self.opts(cold, state), "remount")
        self.assertContent(m2.path("keep"), 1, 3 * MiB)
        self.assertContent(m2.path("more"), 2, 100)

    def test_orphan_segment_removed_at_mount(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        m = self.cmount(hot, opts, "first")
        write_content(m.path("f"), 1, 6 * MiB)
        self.evict(m.path("f"))
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        segs = segments_in(cold)
        self.assertTrue(segs)
        # a segment written but never journaled (a crash between the two)
        src = max(segs)
        d, name = os.path.split(src)
        ids = [int(re.search(r"[0-9a-f]{16}", os.path.basename(x)).group(0), 16) for x in segs]
        orphan = os.path.join(d, name.replace(re.search(r"[0-9a-f]{16}", name).group(0),
                                              "%016x" % (max(ids) + 1000)))
        shutil.copyfile(os.path.join(cold, src), os.path.join(cold, orphan))
        m2 = self.cmount(hot, opts, "second")
        harness.wait_until(lambda: orphan not in segments_in(cold), 10,
                           "orphan segment %s removed" % orphan)
        self.assertEqual(set(segments_in(cold)), set(segs))
        self.assertContent(m2.path("f"), 1, 6 * MiB)

    def test_state_dir_none_is_volatile(self):
        hot, cold, _ = self.make_state()
        opts = self.opts(cold, "none")
        m = self.cmount(hot, opts, "first")
        write_content(m.path("a"), 1, 6 * MiB)
        self.evict(m.path("a"))
        os.mkdir(m.path("d"))
        write_content(m.path("d/b"), 2, 1000)
        fd = os.open(m.path("d/b"), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        self.assertTrue(segments_in(cold))
        self.assertFalse(os.path.exists(os.path.join(cold, ".spillway")),
                         "state_dir=none made %s" % os.path.join(cold, ".spillway"))
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        m2 = self.cmount(hot, opts, "second")
        self.assertEqual(os.listdir(m2.mnt), [], "state_dir=none: a remount is not empty")
        self.assertEqual(stats_of(m2.mnt)["files"], 0)
        # the earlier mount's hot and cold data are removed at mount
        harness.wait_until(lambda: not segments_in(cold), 10,
                           "old segments removed (%s)" % segments_in(cold))
        self.assertEqual(m2.hot_files(), [])
        self.assertFalse(os.path.exists(os.path.join(cold, ".spillway")))

    def test_no_cold_tier_is_volatile(self):
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        m = self.cmount(hot, ["chunk_size=1M"], "first")
        write_content(m.path("a"), 1, 3 * MiB)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        m2 = self.cmount(hot, ["chunk_size=1M"], "second")
        self.assertEqual(os.listdir(m2.mnt), [])
        self.assertEqual(m2.hot_files(), [])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--crash-writer":
        crash_writer(sys.argv[2:])
    else:
        harness.main()
