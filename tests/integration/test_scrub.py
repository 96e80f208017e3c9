#!/usr/bin/env python3
"""test_scrub - the online scrub (`spillctl scrub`, user.spillway.scrub,
tier/extent/scrub.c): a live mount re-reads every sealed extent and checks
its crcs while it serves.

A clean scrub counts every extent's files, bytes and blocks; a byte flipped
in one extent's file on disk is reported by path and block offset (exit 1),
counted in extents.crc_errors, the other files read fine and the damaged
block reads EIO through the daemon; a file open for writing is skipped, and
one rewritten while it is scrubbed is skipped, never reported damaged; an
unmount during a (paced) scrub ends it at once, the daemon exiting cleanly.
"""
import errno
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402
from test_extents import ExtentCase, extent_files, pattern, read, write  # noqa: E402
from test_spillctl import ctl  # noqa: E402

MiB = 1 << 20
BLOCK = 64 << 10
X_SCRUB = "user.spillway.scrub"


def status(m):
    return json.loads(os.getxattr(m.mnt, X_SCRUB))


def blocks(size):
    return (size + BLOCK - 1) // BLOCK


def cached(path):
    """Bytes of path in the page cache (fincore, util-linux)."""
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("fincore %s: %s" % (path, r.stderr))
    return int(r.stdout.strip())


class ScrubCase(ExtentCase):
    timeout = 300

    def make_extent(self, m, name, data):
        """name holds data in a sealed extent: written into RAM, then
        evicted (the evict of a closed file of 16 MiB or more makes an
        extent, durable first). close() returns before the daemon has the
        writer's release (FUSE sends it asynchronously): an evict that
        comes first spills the file to segments, and it is written again."""
        for _ in range(10):
            write(m.path(name), data)
            os.setxattr(m.path(name), "user.spillway.evict", b"1")
            if file_state(m.path(name)).get("extent") == 1:
                break
        self.assert_extent(m.path(name))
        self.assertEqual(file_state(m.path(name))["sealed"], 1)

    def start128(self, **kw):
        # room for every file: none is a stream under pressure, each
        # becomes an extent at its evict only
        return self.start(hot_size="128M", **kw)


class TestScrub(ScrubCase):

    def test_clean_scrub_counts_every_extent(self):
        m = self.start128()
        self.assertEqual(status(m)["state"], "idle")
        files = {"a": pattern(1, 16 * MiB), "d/b": pattern(2, 17 * MiB + 1),
                 "c": pattern(3, 20 * MiB + 7)}
        os.mkdir(m.path("d"))
        for n, data in files.items():
            self.make_extent(m, n, data)
        # the page cache as the node had it: a's pages read lately stay,
        # the others' are not brought in (read past the page cache; a
        # tmpfs's pages are its files: nothing to see there; a MiB of slack
        # for the node's own reclaim meanwhile)
        paths = {n: os.path.join(self.cold, "extents",
                                 extent_files(self.cold, os.stat(m.path(n)).st_ino)[0])
                 for n in files}
        disk = subprocess.run(["stat", "-f", "-c", "%T", self.cold], capture_output=True,
                              text=True).stdout.strip() != "tmpfs"
        for p in paths.values():
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        self.assertEqual(read(m.path("a")), files["a"])
        before, before_a = cached(paths["c"]), cached(paths["a"])
        if disk:
            self.assertGreater(before_a, len(files["a"]) - MiB)
            self.assertLess(before, MiB)
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 0, r)
        if disk:
            self.assertGreater(cached(paths["a"]), before_a - MiB)
            self.assertLessEqual(cached(paths["c"]), before)
        st = status(m)
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(st["files"], 3, st)
        self.assertEqual(st["files_total"], 3, st)
        self.assertEqual(st["bytes"], sum(len(d) for d in files.values()), st)
        self.assertEqual(st["blocks"], sum(blocks(len(d)) for d in files.values()), st)
        self.assertEqual((st["damaged"], st["damaged_blocks"], st["skipped"]), (0, 0, 0), st)
        self.assertEqual(st["damaged_files"], [], st)
        self.assertGreaterEqual(st["finished"], st["started"], st)
        self.assertIn("scrub done: 3 files, 53.0 MiB checked", r.out)
        self.assertIn("0 damaged (0 blocks), 0 skipped", r.out)
        s = stats_of(m.mnt)
        self.assertEqual(s["scrub"], {"runs": 1, "bytes": st["bytes"], "damaged": 0}, s["scrub"])
        self.assertEqual(s["extents"]["crc_errors"], 0, s["extents"])
        for n, data in files.items():
            self.assertEqual(read(m.path(n)), data)
        # again: a second run, the same figures; --status reports it
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(m)["runs"], 2)
        self.assertEqual(stats_of(m.mnt)["scrub"]["bytes"], 2 * st["bytes"])
        r = ctl("scrub", "--status", m.mnt)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("scrub done: 3 files", r.out)

    def test_flipped_byte_is_named_by_path_and_offset(self):
        m = self.start128()
        os.makedirs(m.path("sub", "dir"))
        a, b, c = pattern(4, 16 * MiB), pattern(5, 16 * MiB + 5), pattern(6, 16 * MiB)
        self.make_extent(m, "a", a)
        self.make_extent(m, "sub/dir/b", b)
        self.make_extent(m, "c", c)
        ino = os.stat(m.path("sub/dir/b")).st_ino
        names = extent_files(self.cold, ino)
        self.assertEqual(len(names), 1)
        # a byte of b's extent rots on the disk while the mount serves
        with open(os.path.join(self.cold, "extents", names[0]), "r+b") as f:
            f.seek(2 * MiB + 100)
            f.write(bytes([b[2 * MiB + 100] ^ 0xFF]))
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("damaged: %s: 1 blocks of 64 KiB fail their crc, at byte %d\n"
                      % (m.path("sub/dir/b"), 2 * MiB), r.out)
        self.assertEqual(r.out.count("damaged: "), 1, r.out)
        self.assertIn("1 damaged (1 blocks)", r.out)
        st = status(m)
        self.assertEqual((st["files"], st["damaged"], st["damaged_blocks"]), (3, 1, 1), st)
        self.assertEqual(st["damaged_files"],
                         [{"ino": ino, "blocks": 1, "path": "/sub/dir/b",
                           "offsets": [2 * MiB]}], st)
        s = stats_of(m.mnt)
        self.assertEqual(s["extents"]["crc_errors"], 1, s["extents"])
        self.assertEqual(s["scrub"]["damaged"], 1, s["scrub"])
        self.assertIn("scrub: extent of inode %d: block at byte %d fails its crc"
                      % (ino, 2 * MiB), m.log_text(40))
        # the mount still serves the others
        self.assertEqual(read(m.path("a")), a)
        self.assertEqual(read(m.path("c")), c)
        m.stop()
        # through the daemon (no passthrough), the damaged block is EIO,
        # never wrong bytes, and the rest of b reads fine
        m2 = self.start(extra=["passthrough=off"], hot_size="128M", tag="scrub-flip2")
        fd = os.open(m2.path("sub/dir/b"), os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, MiB, 0), b[:MiB])
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4096, 2 * MiB + 64)
            self.assertEqual(cm.exception.errno, errno.EIO)
        finally:
            os.close(fd)
        self.assertEqual(read(m2.path("a")), a)
        # and a scrub of that mount finds it again
        r = ctl("scrub", m2.mnt)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("damaged: %s:" % m2.path("sub/dir/b"), r.out)

    def test_damaged_file_with_an_odd_name(self):
        """A name with a quote, a backslash, a newline and a byte that is
        not UTF-8 comes back whole in the status's JSON."""
        m = self.start128()
        name = os.fsdecode(b'we"ird\\\n\xff')
        data = pattern(13, 16 * MiB)
        self.make_extent(m, name, data)
        ino = os.stat(m.path(name)).st_ino
        with open(os.path.join(self.cold, "extents", extent_files(self.cold, ino)[0]),
                  "r+b") as f:
            f.seek(5)
            f.write(bytes([data[5] ^ 1]))
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 1, r)
        raw = os.getxattr(m.mnt, X_SCRUB)
        st = json.loads(raw.decode(errors="surrogateescape"))
        self.assertEqual(st["damaged_files"],
                         [{"ino": ino, "blocks": 1, "path": "/" + name, "offsets": [0]}], st)
        self.assertIn("damaged: %s/we\"ird\\" % m.mnt, r.out)

    def test_file_open_for_writing_is_skipped(self):
        m = self.start128()
        a, w = pattern(7, 16 * MiB), pattern(8, 16 * MiB)
        self.make_extent(m, "a", a)
        self.make_extent(m, "w", w)
        with open(m.path("w"), "r+b") as f:
            f.write(b"new")  # a writer: its extent is unsealed until it closes
            self.assertEqual(file_state(m.path("w"))["sealed"], 0)
            r = ctl("scrub", m.mnt)
            self.assertEqual(r.rc, 0, r)
            st = status(m)
            self.assertEqual((st["files"], st["skipped"], st["damaged"]), (1, 1, 0), st)
            self.assertEqual(st["bytes"], len(a), st)
            self.assertIn("1 skipped (being written)", r.out)
        self.wait_sealed(m, m.path("w"))
        self.assertEqual(read(m.path("w")), b"new" + w[3:])
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual((status(m)["files"], status(m)["skipped"]), (2, 0))

    def test_file_rewritten_while_scrubbed_is_not_damaged(self):
        """A paced scrub is in the middle of r when r is rewritten (a
        writer's open unseals it, its close seals it again with new crcs):
        the bytes it reads no longer match the crcs it began with, and the
        file is skipped, not reported damaged."""
        m = self.start128()
        old, new = pattern(9, 24 * MiB), pattern(10, 24 * MiB)
        self.make_extent(m, "r", old)
        r = ctl("scrub", "--no-wait", "--limit", "1M", m.mnt)  # 24 s for r
        self.assertEqual(r.rc, 0, r)
        self.assertIn("scrub: started on %s" % m.mnt, r.out)
        harness.wait_until(lambda: status(m)["bytes"] >= MiB, 30, "the scrub inside r")
        self.assertEqual(status(m)["state"], "running")
        with open(m.path("r"), "r+b") as f:  # in place: the same extent
            for o in range(0, len(new), MiB):
                f.write(new[o:o + MiB])
        self.wait_sealed(m, m.path("r"))
        r = ctl("scrub", "--status", m.mnt, timeout=60)
        self.assertEqual(r.rc, 0, r)
        st = status(m)
        self.assertEqual(st["runs"], 1, st)
        self.assertEqual((st["state"], st["files"], st["skipped"], st["damaged"]),
                         ("done", 0, 1, 0), st)
        self.assertLess(st["bytes"], len(old), st)
        self.assertEqual(stats_of(m.mnt)["extents"]["crc_errors"], 0)
        self.assertEqual(read(m.path("r")), new)
        # its new crcs hold
        r = ctl("scrub", m.mnt)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual((status(m)["files"], status(m)["skipped"]), (1, 0))

    def test_unmount_during_a_scrub_is_clean_and_fast(self):
        m = self.start128()
        self.make_extent(m, "big", pattern(11, 64 * MiB))
        r = ctl("scrub", "--no-wait", "--limit", "1M", m.mnt)  # a minute's run
        self.assertEqual(r.rc, 0, r)
        harness.wait_until(lambda: status(m)["bytes"] > 0, 30, "the scrub under way")
        self.assertEqual(status(m)["state"], "running")
        t0 = time.monotonic()
        problems = m.stop()
        self.assertEqual(problems, [], m.log_text(30))
        self.assertLess(time.monotonic() - t0, 10, m.log_text(30))
        self.assertIn("scrub: cancelled:", m.log_text(30))

    def test_stop_and_usage(self):
        m = self.start128()
        self.make_extent(m, "big", pattern(12, 16 * MiB))
        r = ctl("scrub", "--no-wait", "--limit", "1M", m.mnt)
        self.assertEqual(r.rc, 0, r)
        harness.wait_until(lambda: status(m)["bytes"] > 0, 30, "the scrub under way")
        # another start while it runs: the same run goes on
        r = ctl("scrub", "--no-wait", m.mnt)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("one is running on %s already: not waiting for it" % m.mnt, r.out)
        self.assertEqual(status(m)["runs"], 1)
        r = ctl("scrub", "--stop", m.mnt)
        self.assertEqual(r.rc, 0, r)
        harness.wait_until(lambda: status(m)["state"] != "running", 10, "the scrub cancelled")
        self.assertEqual(status(m)["state"], "cancelled")
        r = ctl("scrub", "--status", m.mnt)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("scrub CANCELLED", r.out)
        # not on a file, not a bad limit, not from another user
        with self.assertRaises(OSError) as cm:
            os.setxattr(m.path("big"), X_SCRUB, b"start")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(OSError) as cm:
            os.setxattr(m.mnt, X_SCRUB, b"start fast")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        r = ctl("scrub", "--limit", "fast", m.mnt)
        self.assertEqual(r.rc, 2, r)
        r = ctl("scrub", self.tmpdir())
        self.assertEqual(r.rc, 2, r)
        self.assertIn("not on a spillway mount", r.err)


if __name__ == "__main__":
    harness.main()
