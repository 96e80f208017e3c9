#!/usr/bin/env python3
"""
test_faultin - fault-in at device speed (issue #13) on real mounts.

A read of a cold chunk fetches and verifies only the 64 KiB blocks it
covers, answers, and restores the rest of the chunk after the reply
(partial restore); a write into a partly restored chunk lands after the
restore and wins; a flipped byte in one block of a segment is EIO for reads
of that block only; sequential readers get chunks restored ahead of them;
fsx with a tiny hot tier in both restore modes; the same partial read on S3
(ranged GET of the reader's blocks first). Every byte read is checked.

Run: python3 test_faultin.py --build BUILD_DIR [-k pattern]
"""

import errno
import os
import re
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import KiB, MiB, content, first_diff, open_uncached, write_content  # noqa: E402
from lib.tier import TierCase, seg_files, seg_footer  # noqa: E402
from lib.fsx import tiny_tier  # noqa: E402

BLOCK = 64 * KiB


def seg_entries(path):
    """Footer entries of a segment of today's format (v3): [(ino, chunk,
    flags, off, len, chunk_len)]."""
    version, _flen, ents = seg_footer(path)
    assert version == 3, version
    return [(ino, chunk, flags, off, ln, clen)
            for ino, chunk, _gen, flags, off, ln, _crc, clen in ents]


class FaultinCase(TierCase):
    """The restore machinery (partial restores, read-ahead, publishing,
    direct reads of random readers): admit=always, so every cold read it
    makes goes through a restore as it did before the admission filter
    (what the filter changes is test_admission's)."""
    timeout = 120

    def cold_file(self, name, tag, size, **opts):
        opts.setdefault("restore", "lazy")
        opts.setdefault("admit", "always")
        self.tier_mount(hot_size="64M", chunk_size="4M", min_spill_size="4M", **opts)
        p = self.p(name)
        write_content(p, tag, size)
        self.evict(p)
        self.assertEqual(self.state(p)["cold"], -(-size // (4 * MiB)))
        return p

    def read_through(self, p, tag, size):
        """Read p from 0 to size in 1 MiB reads (one open, its cached pages
        dropped, kernel readahead on), each checked."""
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            for off in range(0, size, MiB):
                self.check_read(fd, tag, off, min(MiB, size - off))
        finally:
            os.close(fd)

    def flip_in_chunk1(self, chunk_len, at, mask):
        """Flip bits mask of the byte at data offset at of chunk 1's stored
        record (a mapped record, dense: chunk_len bytes of data)."""
        segs = [os.path.join(self.cold[0], n) for n in seg_files(self.cold[0])]
        ents = [(sp, e) for sp in segs for e in seg_entries(sp) if e[1] == 1]
        self.assertEqual(len(ents), 1, ents)
        seg, (_ino, _c, flags, off, _ln, clen) = ents[0]
        self.assertEqual((flags, clen), (1, chunk_len), ents)  # mapped, dense
        with open(seg, "r+b") as f:
            f.seek(off + at)
            b = f.read(1)
            f.seek(off + at)
            f.write(bytes([b[0] ^ mask]))

    def check_read(self, fd, tag, off, n):
        got = os.pread(fd, n, off)
        exp = content(tag, off, n)
        if got != exp:
            self.fail("read %d+%d: wrong from %d\n%s"
                      % (off, n, off + first_diff(got, exp), self.m.log_text(20)))


class TestPartial(FaultinCase):

    def test_middle_of_cold_chunk_first(self):
        """4 KiB in the middle of a cold chunk: served by a partial restore
        (only the chunk read comes back, lazily), then the whole file."""
        size = 16 * MiB
        p = self.cold_file("f", 11, size)
        s0 = self.stats()
        fd = open_uncached(p)
        try:
            self.check_read(fd, 11, 4 * MiB + 1536 * KiB + 123, 4 * KiB)
        finally:
            os.close(fd)
        s1 = self.stats()
        self.assertEqual(s1["partial_restores"] - s0["partial_restores"], 1, s1)
        # answered from the verified read buffer, written into RAM after
        self.assertEqual(s1["buffer_replies"] - s0["buffer_replies"], 1, s1)
        fb = s1["latency"]["first_byte"]["nvme"]
        self.assertGreaterEqual(fb["count"], 1, s1["latency"])
        self.assertGreater(fb["p50_us"], 0, s1["latency"])
        # the rest followed: the chunk is whole in RAM, the others still cold
        self.poll(lambda: self.state(p)["restoring"] == 0, 10, "rest of the chunk")
        st = self.state(p)
        self.assertEqual((st["cold"], st["hot"]), (3, 1), st)
        self.assertGreaterEqual(self.stats()["latency"]["restore"]["nvme"]["count"], 1)
        self.assertContent(p, 11, size)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_many_random_reads_then_whole(self):
        """Random small reads over a cold file (several per chunk, from
        threads), each checked; then everything once more."""
        size = 32 * MiB + 777
        p = self.cold_file("r", 12, size)
        import random
        import threading
        rng = random.Random(3)
        offs = [rng.randrange(size - 8 * KiB) for _ in range(96)]
        errs = []

        def reader(part):
            fd = open_uncached(p)
            try:
                for off in part:
                    got = os.pread(fd, 8 * KiB, off)
                    if got != content(12, off, 8 * KiB):
                        errs.append(off)
            finally:
                os.close(fd)

        ths = [threading.Thread(target=reader, args=(offs[i::4],)) for i in range(4)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        self.assertEqual(errs, [], self.m.log_text(20))
        self.assertGreater(self.stats()["partial_restores"], 0)
        self.assertContent(p, 12, size)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_write_into_partly_restored_chunk(self):
        """A write right after a partial read of the same chunk: the write
        wins, the rest of the chunk restores around it."""
        size = 12 * MiB
        p = self.cold_file("w", 13, size)
        fd = open_uncached(p, os.O_RDWR)
        try:
            self.check_read(fd, 13, 4 * MiB + 2 * MiB, 4 * KiB)
            new = b"\xa5" * (100 * KiB)
            self.assertEqual(os.pwrite(fd, new, 4 * MiB + 3 * MiB + 5), len(new))
        finally:
            os.close(fd)
        # and one more partial chunk, written at once after its read (a new
        # handle: its first read is a partial restore, not a direct read)
        fd = open_uncached(p, os.O_RDWR)
        try:
            self.check_read(fd, 13, 8 * MiB + 100 * KiB, 4 * KiB)
            self.assertEqual(os.pwrite(fd, new, 8 * MiB + 99 * KiB), len(new))
        finally:
            os.close(fd)
        exp = bytearray(content(13, 0, size))
        exp[7 * MiB + 5:7 * MiB + 5 + len(new)] = new
        exp[8 * MiB + 99 * KiB:8 * MiB + 99 * KiB + len(new)] = new
        for rnd in range(2):
            fd = open_uncached(p)
            try:
                got = os.pread(fd, size, 0)
                while len(got) < size:
                    got += os.pread(fd, size - len(got), len(got))
            finally:
                os.close(fd)
            if got != bytes(exp):
                self.fail("round %d: wrong from %d" % (rnd, first_diff(got, bytes(exp))))
            self.evict(p)  # the written chunks spill, then read cold again
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


class TestDirect(FaultinCase):
    """A handle that jumps about reads cold chunks directly: the blocks it
    asks for are read and verified, nothing is restored into RAM."""

    def test_random_reader_restores_nothing(self):
        size = 32 * MiB + 5000
        p = self.cold_file("rnd", 17, size)
        import random
        rng = random.Random(5)
        s0 = self.stats()
        fd = open_uncached(p)
        try:
            # the first read is a partial restore of chunk 0 (one jump is
            # not a pattern); every later jump (> 1 MiB away) is a direct read
            self.check_read(fd, 17, 2 * MiB, 4 * KiB)
            self.poll(lambda: self.state(p)["restoring"] == 0, 10, "chunk 0")
            offs = [2 * MiB]
            while len(offs) < 61 or offs[-1] > size - 3 * MiB:
                off = rng.randrange(4 * MiB, size - 64 * KiB)
                if abs(off - offs[-1]) > 2 * MiB:
                    offs.append(off)
            for off in offs[1:]:
                self.check_read(fd, 17, off, rng.choice((1, 512, 4 * KiB, 60 * KiB)))
            self.check_read(fd, 17, size - 3000, 3000)  # the short last chunk
            st = self.state(p)
        finally:
            os.close(fd)
        s1 = self.stats()
        self.assertEqual(s1["direct_reads"] - s0["direct_reads"], len(offs), s1)
        self.assertEqual(s1["partial_restores"] - s0["partial_restores"], 1, s1)
        self.assertEqual((st["hot"], st["restoring"]), (1, 0), st)  # chunk 0 only
        fb = s1["latency"]["first_byte"]["nvme"]["count"] - s0["latency"]["first_byte"]["nvme"]["count"]
        self.assertGreaterEqual(fb, len(offs) + 1, s1["latency"])
        # a reader that goes on from where it is restores as before
        self.read_through(p, 17, size)
        self.assertEqual(self.state(p)["cold"], 0)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_direct_read_of_flipped_block_is_eio(self):
        size = 8 * MiB
        p = self.cold_file("badd", 18, size)
        bad = 9
        self.flip_in_chunk1(4 * MiB, bad * BLOCK + 321, 0x08)
        fd = open_uncached(p)
        try:
            self.check_read(fd, 18, 3 * MiB, 4 * KiB)  # chunk 0: partial restore
            s0 = self.stats()
            base = 4 * MiB
            # chunk 1, direct reads around the bad block (each more than
            # 1 MiB from the last, but the bad one: one near read is no stream)
            for blk in (60, 3, 45, 20):
                self.check_read(fd, 18, base + blk * BLOCK + 5, 4 * KiB)
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4 * KiB, base + bad * BLOCK + 8 * KiB)
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.check_read(fd, 18, base + 62 * BLOCK + 1, 4 * KiB)
        finally:
            os.close(fd)
        s1 = self.stats()
        self.assertEqual(s1["direct_reads"] - s0["direct_reads"], 5, s1)
        # the kernel retries a failed read once: one or two crc errors
        self.assertIn(s1["errors"]["crc"] - s0["errors"]["crc"], (1, 2), s1)
        self.assertEqual(s1["partial_restores"] - s0["partial_restores"], 0, s1)
        # chunk 0's rest comes in after its reader's reply, on that request's
        # thread: on a loaded machine it may still be under way here
        harness.wait_until(lambda: self.state(p)["restoring"] == 0, 30,
                           "chunk 0's restore to finish")
        st = self.state(p)
        self.assertEqual((st["cold"], st["restoring"]), (1, 0), st)  # chunk 1 stays cold


class TestBadBlock(FaultinCase):

    def test_flipped_byte_is_eio_for_its_block_only(self):
        size = 8 * MiB
        p = self.cold_file("bad", 14, size)
        bad = 5  # block of chunk 1: bytes [4M + 320K, 4M + 384K)
        self.flip_in_chunk1(4 * MiB, bad * BLOCK + 1000, 0x40)
        fd = open_uncached(p)
        try:
            base = 4 * MiB
            for blk in (16, 0, 4, 6, 63):  # the good blocks around it read fine
                self.check_read(fd, 14, base + blk * BLOCK + 17, 4 * KiB)
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4 * KiB, base + bad * BLOCK + 4 * KiB)
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.check_read(fd, 14, base + (bad + 1) * BLOCK, 4 * KiB)
            self.check_read(fd, 14, 0, 4 * MiB)  # chunk 0 is whole and good
        finally:
            os.close(fd)
        self.assertGreater(self.stats()["errors"]["crc"], 0)
        self.assertNotIn("restoring=1", os.getxattr(p, "user.spillway.state").decode())


class TestSequential(FaultinCase):

    def test_sequential_reader_gets_chunks_ahead(self):
        size = 64 * MiB
        p = self.cold_file("seq", 15, size)
        self.read_through(p, 15, size)
        st = self.stats()
        self.assertGreater(st["readahead_chunks"], 0, st)
        self.assertEqual(st["errors"], {"io": 0, "crc": 0})


class TestPublished(FaultinCase):
    """Restores by the workers (restore=open, read-ahead) publish each piece
    of a chunk as it lands: readers of it go on while the rest of the chunk
    still arrives; a bad block fails only the reads that need it; a write
    into a chunk being restored lands after it and wins."""

    def big_chunk_file(self, name, tag, size, chunk="64M"):
        self.tier_mount(hot_size="512M", chunk_size=chunk, min_spill_size=chunk,
                        restore="open", admit="always")
        p = self.p(name)
        write_content(p, tag, size)
        self.evict(p)
        return p

    def test_reader_served_while_rest_arrives(self):
        size = 128 * MiB
        p = self.big_chunk_file("pub", 21, size)
        s0 = self.stats()
        self.read_through(p, 21, size)  # the open queues both chunks for the workers
        s1 = self.stats()
        # 64 MiB chunks come in 1 MiB pieces: the reader caught some of
        # them before their chunk was whole
        self.assertGreater(s1["published_reads"] - s0["published_reads"], 0, s1)
        sys.stderr.write(" [published_reads %d] " % (s1["published_reads"] - s0["published_reads"]))
        self.poll(lambda: self.state(p)["restoring"] == 0, 20, "restores")
        self.assertEqual(self.state(p)["cold"], 0)
        self.assertContent(p, 21, size)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_flipped_byte_in_published_chunk(self):
        size = 32 * MiB
        p = self.big_chunk_file("bad", 22, size, chunk="16M")
        bad = 40  # in the third 1 MiB piece of chunk 1
        self.flip_in_chunk1(16 * MiB, bad * BLOCK + 7, 0x01)
        fd = os.open(p, os.O_RDONLY)  # the workers restore both chunks
        try:
            # the worker of chunk 1 fails at the bad piece, after publishing
            # the two before it; chunk 1 goes back to cold
            self.poll(lambda: self.stats()["errors"]["crc"] > 0, 20, "crc error")
            self.poll(lambda: self.state(p)["restoring"] == 0, 20, "restores")
        finally:
            os.close(fd)
        fd = open_uncached(p)
        try:
            base = 16 * MiB
            for blk in (0, 17, 39, 41, 200, 255):
                self.check_read(fd, 22, base + blk * BLOCK + 100, 4 * KiB)
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4 * KiB, base + bad * BLOCK)
            self.assertEqual(cm.exception.errno, errno.EIO)
            self.check_read(fd, 22, 0, 16 * MiB)  # chunk 0 is whole and good
        finally:
            os.close(fd)
        self.assertNotIn("restoring=1", os.getxattr(p, "user.spillway.state").decode())

    def test_write_into_chunk_being_published(self):
        size = 64 * MiB
        p = self.big_chunk_file("w", 23, size)
        new = b"\x5a" * (300 * KiB)
        fd = os.open(p, os.O_RDWR)  # the worker starts on the chunk
        try:
            self.check_read(fd, 23, 0, 4 * KiB)
            self.assertEqual(os.pwrite(fd, new, 40 * MiB + 3), len(new))
        finally:
            os.close(fd)
        exp = bytearray(content(23, 0, size))
        exp[40 * MiB + 3:40 * MiB + 3 + len(new)] = new
        for rnd in range(2):
            fd = open_uncached(p)
            try:
                got = b""
                while len(got) < size:
                    got += os.pread(fd, min(8 * MiB, size - len(got)), len(got))
            finally:
                os.close(fd)
            if got != bytes(exp):
                self.fail("round %d: wrong from %d" % (rnd, first_diff(got, bytes(exp))))
            self.evict(p)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


class TestFsxTinyHot(harness.SpwTestCase):
    """spw_fsx against a tiny hot tier with a cold tier, restore=lazy and
    restore=open, so reads keep faulting partly restored chunks in."""
    timeout = 400

    def run_mode(self, mode):
        st = tiny_tier(self, [(21, 15000, False, ()), (22, 15000, True, ())],
                       ["restore=" + mode])
        sys.stderr.write("\n  [fsx %s] partial_restores %d, readahead %d, restored %d chunks\n"
                         % (mode, st["partial_restores"], st["readahead_chunks"],
                            st["restored"]["chunks"]))

    def test_lazy(self):
        self.run_mode("lazy")

    def test_open(self):
        self.run_mode("open")


try:
    from lib.s3 import S3Case  # noqa: E402
except Exception:  # noqa: BLE001 - no node: the S3 case skips itself
    S3Case = None

if S3Case is not None:
    class TestS3Partial(S3Case):
        timeout = 120

        def cold_s3_file(self, name, tag, size):
            """A mount on s3rver behind a counting proxy (returned), restore=lazy,
            4 MiB chunks, and name written and evicted."""
            srv = self.s3server()
            px = self.proxy(srv)
            self.s3_mount(srv, endpoint=px.endpoint, hot_size="64M", chunk_size="4M",
                          min_spill_size="4M", restore="lazy", admit="always")
            p = self.p(name)
            write_content(p, tag, size)
            self.evict(p)
            self.assertEqual(self.state(p)["cold"], -(-size // (4 * MiB)))
            return p, px

        def get_sizes(self, px, n0):
            """Byte counts of the ranged GETs the proxy saw since request n0."""
            sizes = []
            for r in px.requests()[n0:]:
                if r["method"] != "GET":
                    continue
                mm = re.match(r"bytes=(\d+)-(\d+)$", r["range"] or "")
                self.assertTrue(mm, r)
                sizes.append(int(mm.group(2)) - int(mm.group(1)) + 1)
            return sizes

        def test_partial_read_ranged_get_first(self):
            size = 12 * MiB
            p, px = self.cold_s3_file("s3f", 16, size)
            n0 = len(px.requests())
            fd = open_uncached(p)
            try:
                got = os.pread(fd, 4 * KiB, 4 * MiB + 2 * MiB + 99)
            finally:
                os.close(fd)
            self.assertEqual(got, content(16, 4 * MiB + 2 * MiB + 99, 4 * KiB))
            st = self.stats()
            self.assertEqual(st["partial_restores"], 1, st)
            self.assertGreaterEqual(st["latency"]["first_byte"]["s3"]["count"], 1)
            self.poll(lambda: self.state(p)["restoring"] == 0, 20, "rest of the chunk")
            sizes = self.get_sizes(px, n0)
            # the reader's block first (small; its map too unless the map
            # cache had it from the spill), then the rest of the chunk
            small = 1 if sizes[1] > 2 * BLOCK else 2
            self.assertLessEqual(max(sizes[:small]), 2 * BLOCK, sizes)
            self.assertGreaterEqual(max(sizes), 4 * MiB - BLOCK, sizes)
            self.assertContent(p, 16, size)
            self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

        def test_random_reader_gets_only_its_blocks(self):
            """A handle that jumps about: after its first read, each read of
            a cold chunk is one ranged GET of the blocks it needs (and the
            record's map when the cache lacks it), never the whole chunk."""
            size = 16 * MiB
            p, px = self.cold_s3_file("s3r", 19, size)
            fd = open_uncached(p)
            try:
                # one jump (a partial restore of chunk 0), then jumps: direct
                self.assertEqual(os.pread(fd, 4 * KiB, 2 * MiB), content(19, 2 * MiB, 4 * KiB))
                self.poll(lambda: self.state(p)["restoring"] == 0, 20, "chunk 0")
                n0 = len(px.requests())
                s0 = self.stats()
                for off in (5 * MiB + 7, 13 * MiB + 99, 9 * MiB, 15 * MiB + 4096):
                    self.assertEqual(os.pread(fd, 4 * KiB, off), content(19, off, 4 * KiB))
            finally:
                os.close(fd)
            s1 = self.stats()
            self.assertEqual(s1["direct_reads"] - s0["direct_reads"], 4, s1)
            sizes = self.get_sizes(px, n0)
            self.assertGreaterEqual(len(sizes), 4, sizes)
            self.assertLessEqual(max(sizes), 2 * BLOCK, sizes)
            st = self.state(p)
            self.assertEqual((st["hot"], st["cold"]), (1, 3), st)
            self.assertEqual(s1["errors"], {"io": 0, "crc": 0})


if __name__ == "__main__":
    harness.main()
