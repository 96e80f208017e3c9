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
   creates, appends, writes past EOF (leaving holes), truncates (shrinks and
   grows, open files and closed ones), punches holes (past EOF too), fsyncs,
   renames and deletes files in the mount and logs to a manifest outside the
   mount what each call returned; the daemon is killed with SIGKILL at a
   seeded random moment (or as a spill, a checkpoint or a GC is seen on
   disk, or as a write grows a file into a new chunk), the dead mount is
   lazily unmounted, in a seeded share of the rounds hot_dir is wiped (a
   reboot), and the filesystem remounted with the same options: every
   acknowledged call is there, byte for byte, across rounds. After a
   reboot, every file whose content was fsync'd or seen wholly spilled is
   there byte for byte, and any other is too, or is reported lost, or moved
   to /lost+found (damaged), by path, as the stats count them. No file
   keeps a chunk past its end.
3. Reboot: hot_dir wiped after a keep_hot unmount or a kill -9: fsync'd and
   spilled files come back intact (one with a hole punched past its end
   too), files with RAM-only data are gone and reported (a warning naming
   each, stats "lost_files"), files with some chunks in segments and some
   only in RAM are kept in /lost+found/#<ino> with holes where RAM was (a
   warning naming each, stats "damaged_files"). The state of the repro in
   ../shared/repro/dirty-chunk-past-eof (a dirty chunk past EOF, fixture
   tests/integration/fixtures/) keeps its file across the reboot. (A plain unmount
   spills everything first: test_ram_back.py.)
4. A second daemon on the same state_dir is refused (one line, exit 1).
5. state_dir=none (and no cold tier at all): a remount is empty.

Knobs (environment):
  SPW_CRASH_ROUNDS=N   crash rounds (default 20)
  SPW_CRASH_SEED=N     seed for the writer and the kill moments (default 1)
  SPW_CRASH_FRESH=N    start from an empty filesystem every N rounds (default 10)
  SPW_CRASH_WIPE=F     share of the rounds that wipe hot_dir after the kill (default 0.4)

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
                      read_all, sha_file, write_content)
from lib.tier import cold_scan, file_state, segments_in, stats_of, temps_in  # noqa: E402

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
# each, so a SIGKILL never tears a line). One call at a time: an upper-case
# line says a call is about to be made, its lower-case twin that it returned.
#   K dir / k dir            mkdir
#   W path tag               about to create path (O_EXCL)
#   P path                   about to reopen path O_WRONLY (changes nothing)
#   O path                   open returned (create or reopen)
#   X path off n tag [g] / x path    pwrite of content(tag, off, n) at off
#                            (past EOF too: a hole between; g: it reaches a
#                            chunk past the file's last one)
#   T path size / t path     truncate to size: ftruncate of an open file, or
#                            truncate(2) of a closed one (shrink or grow)
#   H path off n / h path    fallocate(PUNCH_HOLE | KEEP_SIZE) (past EOF too)
#   S path                   fsync(file) and fsync(parent dir) returned: the
#                            file's content now is durable
#   C path size              close returned
#   U path / u path          unlink
#   N old new / n old new    rename
#   E errno path             a call failed: the writer stops
#
# Rounds chosen by the seed wipe hot_dir after the kill (a reboot): then a
# file whose content was fsync'd (or seen wholly spilled, or that came back
# from an earlier reboot) and not changed since must be there byte for byte;
# one with RAM-only bytes may be intact, or gone with a "recovery: lost" line
# naming it, or moved to /lost+found/#<ino> with a "recovery: damaged" line.

CRASH_ROUNDS = int(os.environ.get("SPW_CRASH_ROUNDS", "20"))
CRASH_SEED = int(os.environ.get("SPW_CRASH_SEED", "1"))
CRASH_FRESH = int(os.environ.get("SPW_CRASH_FRESH", "10"))
# extents (tier/extent) in the kill -9 rounds: "alt" (every other fresh
# state: rounds 10-19 of the default 20), "on" or "off"
CRASH_EXTENTS = os.environ.get("SPW_CRASH_EXTENTS", "alt")
CRASH_WIPE = float(os.environ.get("SPW_CRASH_WIPE", "0.4"))  # share of rounds with a reboot
LIVE_BUDGET = 120 * MiB  # live bytes the writer keeps in the filesystem (about)
MAX_BS = MiB + 4097  # largest single write
PUNCH = harness.FALLOC_FL_PUNCH_HOLE | harness.FALLOC_FL_KEEP_SIZE


def crash_writer(argv):
    """Entry point of the writer process (this file --crash-writer ...)."""
    a = dict(zip(argv[0::2], argv[1::2]))
    mnt, manifest = a["--mnt"], a["--manifest"]
    rnd, seed = int(a["--round"]), int(a["--seed"])
    with open(a["--state"]) as f:
        st = json.load(f)
    files = dict(st["files"])  # path -> size
    dirs = list(st["dirs"])
    rng = random.Random(seed * 1000003 + rnd)
    mfd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tag_next = rnd * 100000 + 1
    serial = 0

    def M(*f):
        os.write(mfd, (" ".join(str(x) for x in f) + "\n").encode())

    def P(rel):
        return os.path.join(mnt, rel)

    def new_tag():
        nonlocal tag_next
        tag_next += 1
        return tag_next - 1

    def fsync(rel, fd):
        os.fsync(fd)
        dfd = os.open(P(os.path.dirname(rel)) if os.path.dirname(rel) else mnt, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        M("S", rel)

    def write_range(rel, fd, tag, start, end, size):
        """[start, end) of stream tag, in writes of one random size, to a
        file of size bytes; its new size."""
        sizes = [MiB, MiB, 256 * KiB, MAX_BS, 128 * KiB - 1]
        bs = rng.choice(sizes + [4096] if end - start <= 2 * MiB else sizes)
        off = start
        while off < end:
            n = min(bs, end - off)
            # "g": it reaches a chunk past the file's last one (the kill
            # mode "grow" waits for one)
            grow = (off + n - 1) // MiB >= -(-size // MiB)
            M("X", rel, off, n, tag, *(["g"] if grow else []))
            w = os.pwrite(fd, content(tag, off, n), off)
            if w != n:
                raise OSError(errno.EIO, "short write %d of %d" % (w, n))
            M("x", rel)
            off += n
            size = max(size, off)
        return size

    def change(rel, fd, size):
        """One change of an open file; its new size."""
        r = rng.random()
        if r < 0.2 or (r < 0.5 and size == 0):  # append
            return write_range(rel, fd, new_tag(), size, size + rng.randint(1, 3 * MiB), size)
        if r < 0.4:  # past EOF, leaving a hole (a few bytes to chunks wide)
            off = size + rng.choice([rng.randint(1, 4096), rng.randint(1, 3 * MiB)])
            return write_range(rel, fd, new_tag(), off, off + rng.randint(1, MAX_BS), size)
        if r < 0.5:  # over the middle, maybe past the end
            off = rng.randrange(size)
            return write_range(rel, fd, new_tag(), off, off + rng.randint(1, MAX_BS), size)
        if r < 0.75:  # shrink or grow
            new = rng.randint(0, size) if rng.random() < 0.5 else size + rng.randint(1, 3 * MiB)
            M("T", rel, new)
            os.ftruncate(fd, new)
            M("t", rel)
            return new
        # a hole punched, part of a chunk, often past EOF (issue 39)
        if rng.random() < 0.4:
            off, n = size + rng.randint(0, 2 * MiB), rng.randint(1, MiB)
        else:
            off, n = rng.randint(0, size + 4096), rng.randint(1, 3 * MiB // 2)
        M("H", rel, off, n)
        harness.fallocate(fd, PUNCH, off, n)
        M("h", rel)
        return size

    def session(rel, fd, size, nchanges):
        """Changes of an open file, fsyncs after some, then close."""
        synced = False
        for _ in range(nchanges):
            size = change(rel, fd, size)
            synced = rng.random() < 0.3
            if synced:
                fsync(rel, fd)
        if not synced and rng.random() < 0.35:
            fsync(rel, fd)
        os.close(fd)
        M("C", rel, size)
        files[rel] = size

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
            live = sum(files.values())
            r = rng.random()
            if live > LIVE_BUDGET or len(files) > 300:
                op = ("unlink" if r < 0.65 else "rename" if r < 0.75 else
                      "truncate" if r < 0.85 else "create")
            else:
                op = ("create" if r < 0.48 else "modify" if r < 0.62 else
                      "truncate" if r < 0.68 else "unlink" if r < 0.84 else
                      "rename" if r < 0.97 else "mkdir")
            if op in ("modify", "truncate", "unlink", "rename") and not files:
                op = "create"
            if op == "create":
                path = new_name(rng.choice(dirs + [""]))
                tag = new_tag()
                M("W", path, tag)
                fd = os.open(P(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                M("O", path)
                size = write_range(path, fd, tag, 0, pick_size(), 0)
                session(path, fd, size, 0 if rng.random() < 0.7 else rng.randint(1, 2))
            elif op == "modify":
                path = rng.choice(sorted(files))
                M("P", path)
                fd = os.open(P(path), os.O_WRONLY)
                M("O", path)
                session(path, fd, files[path], rng.randint(1, 3))
            elif op == "truncate":
                # a closed file, by path; then an fsync, sometimes
                path = rng.choice(sorted(files))
                size = files[path]
                new = (rng.randint(0, size) if live > LIVE_BUDGET or rng.random() < 0.5
                       else size + rng.randint(1, 3 * MiB))
                M("T", path, new)
                os.truncate(P(path), new)
                M("t", path)
                files[path] = new
                if rng.random() < 0.4:
                    M("P", path)
                    fd = os.open(P(path), os.O_WRONLY)
                    M("O", path)
                    fsync(path, fd)
                    os.close(fd)
                    M("C", path, new)
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


_SHA = {}  # (size, extents) -> sha256 hex


class Content:
    """A file's bytes as the writer left them: size, and extents (lo, hi,
    tag) holding content(tag, lo, hi - lo), zeros elsewhere. Immutable."""

    __slots__ = ("size", "ext")

    def __init__(self, size=0, ext=()):
        self.size = size
        self.ext = tuple(ext)

    def _put(self, lo, hi, tag):
        out = []
        for a, b, t in self.ext:
            if b <= lo or a >= hi:
                out.append((a, b, t))
                continue
            if a < lo:
                out.append((a, lo, t))
            if b > hi:
                out.append((hi, b, t))
        if tag is not None and hi > lo:
            out.append((lo, hi, tag))
        return sorted(out)

    def write(self, off, n, tag):
        return Content(max(self.size, off + n), self._put(off, off + n, tag))

    def truncate(self, size):
        return Content(size, self._put(size, max(size, self.size), None))

    def punch(self, off, n):
        return Content(self.size, self._put(off, min(off + n, self.size), None))

    def read(self, lo, hi):
        hi = min(hi, self.size)
        out = bytearray(max(0, hi - lo))
        for a, b, t in self.ext:
            s, e = max(a, lo), min(b, hi)
            if s < e:
                out[s - lo:e - lo] = content(t, s, e - s)
        return bytes(out)

    def sha(self):
        key = (self.size, self.ext)
        if key not in _SHA:
            h = hashlib.sha256()
            for off in range(0, self.size, 4 * MiB):
                h.update(self.read(off, off + 4 * MiB))
            _SHA[key] = h.hexdigest()
        return _SHA[key]


class FileRec:
    """A file of the model: its content and why that content is durable
    (None: it may be only in RAM)."""

    def __init__(self, c, durable=None):
        self.c = c
        self.durable = durable


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
        self.files = {}  # path -> FileRec
        self.dirs = set()
        self.gone = set()  # unlinked, renamed away or lost: must not exist

    def to_json(self):
        return {"files": {p: v.c.size for p, v in self.files.items()},
                "dirs": sorted(self.dirs)}


class Replay:
    """A round's manifest applied to the model: pending is the one call that
    may or may not have happened (a change of a file: ("change", path, kind,
    before, after)); open_files the files open at the kill. obs: (manifest
    line count, path) of files seen wholly spilled during the round."""

    def __init__(self, model, lines, obs=()):
        self.pending = None
        self.open_files = set()
        self.counts = {k: 0 for k in ("writes", "holes", "truncates", "ftruncates", "punches",
                                      "punches_past_eof", "fsynced", "unlinks", "renames",
                                      "bytes_closed", "spilled_seen")}
        self.error = None
        obs = sorted(obs)
        j = 0
        for i, ln in enumerate(lines):
            while j < len(obs) and obs[j][0] <= i:
                self.seen_spilled(model, obs[j][1])
                j += 1
            self.line(model, ln)

    def seen_spilled(self, model, rel):
        # valid only if no call on it was under way when it was looked at
        # (changes after it clear the mark again)
        p = self.pending
        if rel in model.files and rel not in self.open_files and not (p and rel in p[1:3]):
            model.files[rel].durable = model.files[rel].durable or "seen spilled"
            self.counts["spilled_seen"] += 1

    def line(self, model, ln):
        f = ln.split()
        if not f:
            return
        k, c = f[0], self.counts
        rec = model.files.get(f[1]) if len(f) > 1 else None
        if k == "W":
            self.pending = ("create", f[1])
        elif k == "P":
            self.pending = ("open", f[1])
        elif k == "O":
            if self.pending[0] == "create":
                model.files[f[1]] = FileRec(Content())
            self.open_files.add(f[1])
            self.pending = None
        elif k in ("X", "T", "H"):
            if k == "X":
                off, n, tag = int(f[2]), int(f[3]), int(f[4])
                after = rec.c.write(off, n, tag)
                kind = "hole" if off > rec.c.size else "write"
            elif k == "T":
                after = rec.c.truncate(int(f[2]))
                kind = "truncate"
            else:
                off, n = int(f[2]), int(f[3])
                after = rec.c.punch(off, n)
                kind = "punch past EOF" if off + n > rec.c.size else "punch"
            self.pending = ("change", f[1], kind, rec.c, after)
        elif k in ("x", "t", "h"):
            kind = self.pending[2]
            rec.c = self.pending[4]
            rec.durable = None
            self.pending = None
            c["writes" if kind in ("write", "hole") else "punches" if k == "h" else
              "ftruncates" if f[1] in self.open_files else "truncates"] += 1
            if kind == "hole":
                c["holes"] += 1
            if kind == "punch past EOF":
                c["punches_past_eof"] += 1
        elif k == "S":
            rec.durable = "fsync'd"
            c["fsynced"] += 1
        elif k == "C":
            if rec.c.size != int(f[2]):
                raise AssertionError("model: %s closed at %s bytes, the model has %d"
                                     % (f[1], f[2], rec.c.size))
            self.open_files.discard(f[1])
            c["bytes_closed"] += rec.c.size
        elif k == "U":
            self.pending = ("unlink", f[1])
        elif k == "u":
            del model.files[f[1]]
            model.gone.add(f[1])
            self.pending = None
            c["unlinks"] += 1
        elif k == "N":
            self.pending = ("rename", f[1], f[2])
        elif k == "n":
            model.files[f[2]] = model.files.pop(f[1])
            model.gone.add(f[1])
            self.pending = None
            c["renames"] += 1
        elif k == "K":
            self.pending = ("mkdir", f[1])
        elif k == "k":
            model.dirs.add(f[1])
            self.pending = None
        elif k == "E":
            self.error = ln
        else:
            raise AssertionError("bad manifest line %r" % ln)


def recovery_reports(log):
    """{path: size} of "recovery: lost" lines, {path: (size, lost+found
    name)} of "recovery: damaged" lines (paths without the leading /)."""
    lost, damaged = {}, {}
    for ln in log.splitlines():
        r = re.search(r"recovery: lost /(\S+) \((\d+) bytes\)", ln)
        if r:
            lost[r.group(1)] = int(r.group(2))
        r = re.search(r"recovery: damaged /(\S+) \((\d+) bytes\).* as /(lost\+found/#\d+)", ln)
        if r:
            damaged[r.group(1)] = (int(r.group(2)), r.group(3))
    return lost, damaged


def check_between(got, before, after):
    """A change of a file was under way at the kill: each byte is what it
    was before or what the change writes (a write past EOF may leave zeros
    between: its pages need not land in order). None, or what is wrong."""
    lo = min(before.size, after.size)
    hi = max(before.size, after.size)
    if not lo <= len(got) <= hi:
        return "size %d, expected %d..%d" % (len(got), lo, hi)
    for off in range(0, len(got), 4 * MiB):
        g = got[off:off + 4 * MiB]
        end = off + len(g)
        b, a = before.read(off, end), after.read(off, end)
        b += bytes(len(g) - len(b))  # past the old end: zeros
        a += bytes(len(g) - len(a))
        if g == b or g == a:
            continue
        for i in range(len(g)):
            if g[i] != b[i] and g[i] != a[i]:
                return "byte %d is neither the old nor the new one" % (off + i)
    return None


class TestCrash(DurCase):
    timeout = 21 * max(20, CRASH_ROUNDS)  # 420 s for the default 20 rounds

    def test_kill9_rounds(self):
        t_start = time.monotonic()
        rng = random.Random(CRASH_SEED)
        tmp = self.tmpdir()
        self.writer = None
        self.deferred = []
        self.addCleanup(self._kill_writer)
        model = None
        totals = {"rounds": CRASH_ROUNDS, "wipes": 0, "writes": 0, "holes": 0, "truncates": 0,
                  "ftruncates": 0, "punches": 0, "punches_past_eof": 0, "bytes_closed": 0,
                  "fsynced": 0, "unlinks": 0, "renames": 0, "spilled_seen": 0,
                  "durable_at_wipes": 0, "lost": 0, "damaged": 0, "intact_ram_only": 0,
                  "past_eof_chunks": 0, "segments_seen": 0, "kills": {}, "spill_kills": 0,
                  "checkpoints_seen": 0, "gc_seen": 0, "max_segments": 0, "max_extents": 0}
        m = None
        hot = cold = None
        for rnd in range(CRASH_ROUNDS):
            if rnd % CRASH_FRESH == 0:
                if m is not None:
                    self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
                    m.stop()
                hot, cold, _ = self.make_state()
                model = Model()
                ext_on = CRASH_EXTENTS == "on" or (CRASH_EXTENTS == "alt"
                                                   and rnd // CRASH_FRESH % 2 == 1)
                opts = self.opts(cold, None, journal_sync_ms="100", checkpoint_size="64K",
                                 write_wait="30s", extents="on" if ext_on else "off")
                m = self.cmount(hot, opts, "r%02d" % rnd)
            self.ctx = "seed %d round %d" % (CRASH_SEED, rnd)
            m = self.crash_round(rnd, rng, m, model, hot, cold, opts, tmp, totals)
        # and a clean unmount + remount at the end: everything is still there
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        m = self.cmount(hot, opts, "final")
        self.verify(m, model, Replay(model, []), False, "final clean remount", {})
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
        # each kind of call and a reboot at least once (a short run on a
        # sanitizer build, 4 rounds, may miss one)
        for k in ("holes", "truncates", "ftruncates", "punches", "punches_past_eof"):
            if CRASH_ROUNDS >= 10:
                self.assertGreater(totals[k], 0, "no %s: %s" % (k, totals))
        if CRASH_ROUNDS >= 10 and CRASH_WIPE > 0:
            self.assertGreater(totals["wipes"], 0, totals)
            self.assertGreater(totals["durable_at_wipes"], 0,
                               "no fsync'd or spilled file met a reboot: %s" % totals)
        self.assertGreater(totals["segments_seen"], 0, "no spill happened: %s" % totals)
        if CRASH_EXTENTS == "on" or (CRASH_EXTENTS == "alt" and CRASH_ROUNDS > CRASH_FRESH):
            self.assertGreater(totals["max_extents"], 0,
                               "extents=on, yet no file had one at a remount: %s" % totals)
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
        mode = rng.choice(["timer", "timer", "spill", "spill", "checkpoint", "gc", "grow"])
        wipe = rng.random() < CRASH_WIPE
        # files looked at while the writer runs (a wipe round): those wholly
        # spilled must survive the reboot (unless changed after the look)
        obs_rng = random.Random(CRASH_SEED * 7919 + rnd)
        obs_pool = sorted(model.files) if wipe else []
        obs = []
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

        def last_line():
            with open(manifest, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 512))
                tail = f.read().decode(errors="replace").split("\n")
            return tail[-2] if len(tail) > 1 else ""

        def look():
            # the manifest's length first: a call on the file after it
            # shows in the lines from there on
            at = len(manifest_lines())
            for rel in obs_rng.sample(obs_pool, min(4, len(obs_pool))):
                try:
                    st = file_state(m.path(rel))
                except OSError:
                    continue
                if st["dirty"] == 0 and st["spilling"] == 0:
                    obs.append((at, rel))

        # the writer is running (it wrote something) before the clock starts
        deadline = time.monotonic() + 20
        while not any(ln.startswith("x ") for ln in manifest_lines()):
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
                if obs_pool:
                    look()
                time.sleep(0.01)
        else:
            end = time.monotonic() + rng.uniform(0.0, 1.0)
            while time.monotonic() < end:
                writer_check()
                if obs_pool:
                    look()
                time.sleep(0.01)
            deadline = time.monotonic() + 8
            prev = segments_in(cold)
            while mode == "grow" and time.monotonic() < deadline and event is None:
                # a write into a new chunk past the end is under way (the
                # chunk's record and the size's were apart once, issue 39)
                ln = last_line()
                if ln.startswith("X ") and ln.endswith(" g"):
                    event = "grow"
                    time.sleep(rng.uniform(0, 0.002))
                else:
                    writer_check()
                    time.sleep(0.0002)
            while mode != "grow" and time.monotonic() < deadline and event is None:
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
        if wipe:  # the reboot: the tmpfs is empty
            shutil.rmtree(hot)
            totals["wipes"] += 1
            kind += " + reboot"

        lines = manifest_lines()
        rp = Replay(model, lines, obs)
        for k, v in rp.counts.items():
            totals[k] += v
        self.assertGreater(rp.counts["writes"], 0, "%s: no write acknowledged" % self.ctx)

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
        totals["max_extents"] = max(totals["max_extents"], s["extents"]["files"])
        totals["past_eof_chunks"] += s.get("recovery", {}).get("past_eof_chunks", 0)
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
        try:
            self.verify(m2, model, rp, wipe, "after kill (%s)" % kind, totals)
        except AssertionError:
            keep = os.path.join(harness.LOG_DIR, "%s.manifest.%02d"
                                % (harness._current_test[0], rnd))
            shutil.copy(manifest, keep)
            with open(keep + ".obs", "w") as f:
                f.write("".join("%d %s\n" % o for o in obs))
            sys.stderr.write("\n[crash] manifest kept in %s (and what was seen spilled: "
                             "%s.obs)\n" % (keep, keep))
            raise
        return m2

    def verify(self, m, model, rp, wiped, when, totals):
        """Check the mount against the model; then settle the ambiguous files
        (delete half-written ones, the lost and damaged ones) so the model is
        exact again."""
        ctx = "%s, %s" % (getattr(self, "ctx", ""), when)
        mnt = m.mnt
        problems = []
        pending = rp.pending
        log = m.log_all()
        lost, damaged = recovery_reports(log)
        s = stats_of(mnt)
        if (s.get("lost_files", 0), s.get("damaged_files", 0)) != (len(lost), len(damaged)):
            problems.append("stats lost_files %s, damaged_files %s; the log names %d lost, %d "
                            "damaged" % (s.get("lost_files"), s.get("damaged_files"),
                                         len(lost), len(damaged)))
        if not wiped and (lost or damaged):
            problems.append("kill -9 (no reboot) lost or damaged files: %s %s"
                            % (sorted(lost), sorted(damaged)))

        def exists(rel):
            return os.path.lexists(os.path.join(mnt, rel))

        def read(rel):
            fd = open_uncached(os.path.join(mnt, rel))
            try:
                return read_all(fd, os.fstat(fd).st_size + 1)
            finally:
                os.close(fd)

        def check(rel, states, between, why):
            """rel holds one of states exactly (between: a change under
            way, (before, after))."""
            p = os.path.join(mnt, rel)
            try:
                if between:
                    err = check_between(read(rel), *between)
                    if err:
                        problems.append("%s (%s, %s under way): %s"
                                        % (rel, why, pending[2], err))
                    return
                h, n = sha_file(p)
            except OSError as e:
                problems.append("%s (%s, %d bytes): %s" % (rel, why, states[0].size, e))
                return
            if any((h, n) == (c.sha(), c.size) for c in states):
                return
            c = states[-1]
            where = ""
            if c.size <= 32 * MiB:
                got = read(rel)
                d = first_diff(got, c.read(0, c.size))
                where = " first difference at %d (zeros there: %s)" % (
                    d, got[d:d + 16].count(0) == min(16, max(0, len(got) - d)))
            problems.append("%s (%s): %d bytes sha %s..., expected %d bytes sha %s...%s"
                            % (rel, why, n, h[:12], c.size, c.sha()[:12], where))

        # every file of the model, under its one or two possible names
        ambiguous = set()
        names_of = {}
        for rel in model.files:
            names_of[rel] = [rel]
        if pending and pending[0] == "rename":
            names_of[pending[1]] = [pending[1], pending[2]]
            ambiguous = {pending[1], pending[2]}
        elif pending and pending[0] in ("create", "unlink", "mkdir"):
            ambiguous = {pending[1]}
        reported = set()
        resolved = {}  # rel -> the name it has now, or None (lost or damaged)
        for rel, rec in sorted(model.files.items()):
            between = None
            states = [rec.c]
            if pending and pending[0] == "change" and pending[1] == rel:
                states = [pending[3], pending[4]]
                if pending[2] != "truncate":
                    between = (pending[3], pending[4])
            # the content must be there: acknowledged and no reboot, or
            # durable and not being changed
            must = not wiped or (rec.durable and len(states) == 1)
            why = rec.durable or ("open" if rel in rp.open_files else "closed")
            names = names_of[rel]
            here = [n for n in names if exists(n)]
            said_lost = [n for n in names if n in lost]
            said_damaged = [n for n in names if n in damaged]
            reported |= set(said_lost) | set(said_damaged)
            if wiped and must:
                totals["durable_at_wipes"] += 1
            if len(here) > 1:
                problems.append("rename %s -> %s in flight: both names exist" % tuple(names))
                continue
            if here:
                if said_lost or said_damaged:
                    problems.append("%s: reported lost or damaged, but it is there"
                                    % here[0])
                check(here[0], states, between, why)
                resolved[rel] = here[0]
                if wiped and not must:
                    totals["intact_ram_only"] += 1
                continue
            resolved[rel] = None
            if pending and pending[0] == "unlink" and pending[1] == rel:
                continue
            if must and (said_lost or said_damaged):
                problems.append("%s (%s, %d bytes): %s after the reboot: %s"
                                % (rel, why, rec.c.size, "declared lost" if said_lost else
                                   "moved to lost+found", [ln for ln in log.splitlines()
                                                           if "/" + rel + " " in ln][:2]))
            elif must:
                problems.append("%s (%s, %d bytes): missing" % (rel, why, rec.c.size))
            elif said_lost:
                totals["lost"] += 1
            elif said_damaged:
                size, lf = damaged[said_damaged[0]]
                if not os.path.isfile(os.path.join(mnt, lf)):
                    problems.append("%s: reported damaged, kept as %s, which is not there"
                                    % (rel, lf))
                else:
                    n = os.stat(os.path.join(mnt, lf)).st_size
                    sizes = [c.size for c in states]
                    # a write under way: any size between
                    if not (min(sizes) <= n <= max(sizes) if between else n in sizes):
                        problems.append("%s: kept as %s with %d bytes, expected %s"
                                        % (rel, lf, n, sizes))
                totals["damaged"] += 1
            else:
                problems.append("%s (%s, %d bytes, may have been only in RAM): missing "
                                "with no \"recovery: lost\" or \"damaged\" line"
                                % (rel, why, rec.c.size))
        for rel in sorted(set(lost) | set(damaged)):
            if rel not in reported and not (pending and pending[0] == "create" and
                                            pending[1] == rel):
                problems.append("%s: reported lost or damaged, but the writer had no such "
                                "file" % rel)
        for rel in sorted(model.gone - ambiguous):
            if exists(rel):
                problems.append("%s: unlinked or renamed away before the kill, but it is back"
                                % rel)
        for d in sorted(model.dirs):
            if not os.path.isdir(os.path.join(mnt, d)):
                problems.append("%s/: directory missing" % d)
        # the one call with no file of the model yet
        if pending and pending[0] == "create" and exists(pending[1]):
            if pending[1] not in model.files and os.stat(os.path.join(mnt, pending[1])).st_size:
                problems.append("%s: create in flight, file has %d bytes"
                                % (pending[1], os.stat(os.path.join(mnt, pending[1])).st_size))
        # nothing else; no file keeps a chunk past its end (issue 39)
        known = set(model.files) | ambiguous | model.dirs
        known |= {lf for _, lf in damaged.values()} | {"lost+found"}
        for dirpath, dirnames, filenames in os.walk(mnt):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                rel = os.path.relpath(p, mnt)
                if rel not in known:
                    problems.append("%s: exists but the writer never had it there" % rel)
                elif n in filenames and not rel.startswith("lost+found/"):
                    try:
                        st = file_state(p)
                        size = os.stat(p).st_size
                    except OSError as e:
                        problems.append("%s: state: %s" % (rel, e))
                        continue
                    if st["hot"] + st["cold"] + st["restoring"] > -(-size // MiB):
                        problems.append("%s: %d bytes, its index holds chunks past its end: %s"
                                        % (rel, size, st))
        if problems:
            killed = harness.log_tail(getattr(self, "killed_log", ""), 25)
            self.fail("%s: %d problem(s):\n  %s\n--- killed daemon log ---\n%s\n"
                      "--- recovered daemon log ---\n%s"
                      % (ctx, len(problems), "\n  ".join(problems[:40]), killed,
                         m.log_text(25)))

        # settle: half-written files go, lost and damaged ones too (their
        # remains in lost+found); ambiguous calls resolved as observed
        for _, lf in damaged.values():
            os.unlink(os.path.join(mnt, lf))
        for rel, now in resolved.items():
            rec = model.files.pop(rel)
            changing = pending and pending[0] == "change" and pending[1] == rel
            if now is None or rel in rp.open_files or changing:
                if now is not None:
                    os.unlink(os.path.join(mnt, now))
                model.gone.add(rel)
                if pending and pending[0] == "rename" and pending[1] == rel:
                    model.gone.add(pending[2])
                continue
            if now != rel:
                model.gone.add(rel)
            if wiped:  # no RAM left: what came back is all in segments
                rec.durable = rec.durable or "back from a reboot"
            model.files[now] = rec
        if pending is not None:
            kind = pending[0]
            if kind == "create" and pending[1] not in resolved:
                if exists(pending[1]):
                    os.unlink(os.path.join(mnt, pending[1]))
                model.gone.add(pending[1])
            elif kind == "rename" and not exists(pending[2]):
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
        # damaged: some bytes in segments, some only in RAM. What the
        # segments hold is kept, in /lost+found/#<ino>, the RAM-only chunks
        # holes: rel -> (tag, size, the lost range [lo, hi))
        damaged = {}
        # fsync'd, then appended to: the new bytes are RAM only
        fd = os.open(p("appended"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, content(80, 0, 2 * MiB))
        os.fsync(fd)
        os.write(fd, content(80, 2 * MiB, 1000))
        os.close(fd)
        damaged["appended"] = (80, 2 * MiB + 1000, 2 * MiB, 2 * MiB + 1000)
        # spilled, then one chunk rewritten in RAM
        write_content(p("partial"), 81, 5 * MiB)
        self.evict(p("partial"))
        fd = os.open(p("partial"), os.O_WRONLY)
        os.pwrite(fd, b"new", 2 * MiB + 7)
        os.close(fd)
        # (written over its cold copy: the chain's base keeps the old bytes
        # of the block, which is what the segments hold)
        damaged["partial"] = (81, 5 * MiB, 2 * MiB, 2 * MiB)
        # fsync'd with a hole punched past its end (KEEP_SIZE): no byte of
        # the file is in RAM, so nothing is lost (issue 39: the punch marked
        # a chunk past EOF dirty, no spill took it, and the reboot removed
        # the whole file)
        write_content(p("punched"), 82, 2 * MiB)
        fd = os.open(p("punched"), os.O_WRONLY)
        os.fsync(fd)
        r = subprocess.run(["fallocate", "-p", "-o", str(2 * MiB + 512 * KiB), "-l", "4096",
                            p("punched")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.fsync(fd)
        os.close(fd)
        keep["punched"] = (82, 2 * MiB)
        inos = {rel: os.stat(p(rel)).st_ino for rel in damaged}
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
        for rel in lost + list(damaged):
            if os.path.lexists(m2.path(rel)):
                self.fail("%s had RAM-only data but is still there after the reboot (size %d)"
                          % (rel, os.lstat(m2.path(rel)).st_size))
        self.assertEqual(sorted(os.listdir(m2.path("d"))),
                         sorted(["synced0", "synced1", "synced2", "empty"]))
        self.assertEqual(sorted(os.listdir(m2.path("lost+found"))),
                         sorted("#%d" % i for i in inos.values()))
        self.assertEqual(stat.S_IMODE(os.stat(m2.path("lost+found")).st_mode), 0o700)
        for rel, (tag, size, lo, hi) in damaged.items():
            lf = m2.path("lost+found/#%d" % inos[rel])
            with open(lf, "rb") as f:
                got = f.read()
            self.assertEqual(len(got), size, rel)
            want = content(tag, 0, lo) + bytes(hi - lo) + content(tag, hi, size - hi)
            self.assertTrue(got == want, "%s kept as %s: first difference at %s"
                            % (rel, lf, first_diff(got, want)))
        log = m2.log_all()
        for rel in lost + list(damaged):
            word = "lost" if rel in lost else "damaged"
            hits = [ln for ln in log.splitlines() if word in ln and "/" + rel + " " in ln]
            self.assertTrue(hits, "no log line with %r and %s:\n%s"
                            % (word, rel, m2.log_text(40)))
            self.assertTrue(any(re.search(r"warn", ln, re.I) for ln in hits),
                            "not at warning level: %s" % hits)
        s = stats_of(m2.mnt)
        self.assertEqual(s.get("lost_files"), len(lost), json.dumps(s))
        self.assertEqual(s.get("damaged_files"), len(damaged), json.dumps(s))
        self.assertEqual(s["files"], len(keep) + len(damaged), json.dumps(s))
        # the lost names can be used again
        write_content(m2.path("d/hot0"), 90, 10)
        self.assertContent(m2.path("d/hot0"), 90, 10)
        # and a second remount does not report them again
        self.assertEqual(m2.unmount_clean(), 0, m2.log_text(20))
        m2.stop()
        m3 = self.cmount(hot, opts, "again")
        self.assertEqual(stats_of(m3.mnt).get("lost_files"), 0)
        self.assertEqual(stats_of(m3.mnt).get("damaged_files"), 0)
        self.assertEqual(len(os.listdir(m3.path("lost+found"))), len(damaged))
        self.assertContent(m3.path("d/hot0"), 90, 10)
        for rel, (tag, size) in sorted(keep.items()):
            self.assertContent(m3.path(rel), tag, size, "after a second remount")

    def test_reboot_after_unmount_keep_hot(self):
        self.reboot("unmount")

    def test_dirty_chunk_past_eof_state(self):
        """The state of ../shared/repro/dirty-chunk-past-eof (kill -9
        rounds: /d/r016_w1_0073 is 2 MiB, both chunks in a segment, and its
        index held a third chunk, HOT_DIRTY, past its end): the chunk is
        dropped at mount, fsync and a clean unmount leave nothing in RAM,
        and after a reboot the file is still there. (The segments are not
        in the fixture: reads of the data fail with EIO, as they should.)"""
        hot, cold, _ = self.make_state()
        fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                               "dirty-chunk-past-eof.tar.gz")
        work = self.tmpdir()
        subprocess.run(["tar", "-xzf", fixture, "-C", work], check=True)
        state = os.path.join(cold, ".spillway")
        shutil.copytree(os.path.join(work, "state"), state)
        shutil.copytree(os.path.join(work, "hot"), hot)
        os.chmod(state, 0o700)
        os.chmod(hot, 0o700)
        with open(os.path.join(state, "tiers"), "w") as f:
            f.write("uuid=fea3263456e67a58154de812f8d0cadf\nchunk_size=1048576\nnvme=%s\n"
                    % cold)
        opts = self.opts(cold)
        rel = "d/r016_w1_0073"
        m = self.cmount(hot, opts, "first")
        self.assertEqual(os.stat(m.path(rel)).st_size, 2 * MiB)
        st = self.state(m.path(rel))
        self.assertEqual((st["hot"], st["dirty"], st["cold"]), (0, 0, 2), st)
        self.assertIn("chunks past its end", m.log_all())
        self.assertEqual(stats_of(m.mnt)["recovery"]["past_eof_chunks"], 1)
        fd = os.open(m.path(rel), os.O_RDWR)
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        self.assertNotIn("could not be spilled", m.log_all())
        if os.path.exists(hot):  # removed at unmount when empty
            self.assertEqual([n for n in os.listdir(hot) if not n.startswith(".")], [])
            shutil.rmtree(hot)  # the reboot
        m2 = self.cmount(hot, opts, "after")
        self.assertTrue(os.path.exists(m2.path(rel)), m2.log_text(30))
        self.assertEqual(os.stat(m2.path(rel)).st_size, 2 * MiB)
        self.assertNotIn("recovery: lost", m2.log_all())
        s = stats_of(m2.mnt)
        self.assertEqual((s.get("lost_files"), s.get("damaged_files"),
                          s["recovery"]["past_eof_chunks"]), (0, 0, 0), json.dumps(s))

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
