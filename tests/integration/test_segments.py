#!/usr/bin/env python3
"""
test_segments - segment format v2 on real mounts: what the cold tier costs.

Many small files spilled by pressure (and the rest by user.spillway.evict)
take about their own size in the cold directory (records packed on 8 bytes,
no per-record overhead below 64 KiB): the segments' data areas are at most
1.25x the live bytes, and whole segments at most that plus header and footer.
A sparse 1 GiB file with a few scattered writes takes about what was written
in the cold tier, reads back equal, and keeps its holes after the restore
(SEEK_DATA/SEEK_HOLE through the mount, and the hot file's allocation).
Segments are parsed here from the wire format in tier/segment/segment.h.

Run: python3 test_segments.py --build BUILD_DIR [-k pattern]
"""

import os
import random
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.tier import TierCase, seg_footer  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
PAGE = 4096
HDR = 4096
ENTRY_V2 = 44


def segments(d):
    """[(size, footer_len, entry count, version)] of the segments in cold dir d."""
    out = []
    for n in sorted(os.listdir(d)):
        if not (n.startswith("seg-") and n.endswith(".spw")):
            continue
        p = os.path.join(d, n)
        version, flen, ents = seg_footer(p)
        out.append((os.stat(p).st_size, flen, len(ents), version))
    return out


def small_content(i, n):
    r = random.Random(i * 7919 + 17)
    return struct.pack("<I", i) + r.randbytes(n - 4)


class SegCase(TierCase):
    """TierCase with one cold directory (self.cold, a path) and the
    daemon's default chunk_size unless given."""

    timeout = 300

    def tier_mount(self, hot_size, **opts):
        self.cold = self.cold_dir()
        opts.setdefault("extents", "off")  # segments are what these tests read
        o = ["nvme=" + self.cold] + ["%s=%s" % kv for kv in opts.items()]
        self.m = self.mount(hot_size=hot_size, opts=o)
        self.mnt = self.m.mnt
        return self.m


class TestSmallObjects(SegCase):
    N = 5000

    def test_small_files_packed(self):
        # pressure spills most files into shared segments (5,000 files take
        # 20 MB of tmpfs pages: a 32M tier never has to refuse a write)
        self.tier_mount("32M", chunk_size="1M", min_spill_size="1M", spill_threshold="0.3",
                        low_watermark="0.1")
        rnd = random.Random(0x5E6)
        sizes = [rnd.randint(100, 3000) for _ in range(self.N)]
        os.mkdir(os.path.join(self.mnt, "d"))
        paths = [os.path.join(self.mnt, "d", "f%05d" % i) for i in range(self.N)]
        for i, p in enumerate(paths):
            with open(p, "wb") as f:
                f.write(small_content(i, sizes[i]))
        # the rest by hand: every file is then in exactly one record
        by_hand = 0
        for p in paths:
            if self.state(p)["cold"] == 0 and self.state(p)["hot"] > 0:
                self.evict(p)
                by_hand += 1
        segs = segments(self.cold)
        live = sum(sizes)
        nrec = sum(s[2] for s in segs)
        total = sum(s[0] for s in segs)
        data_area = sum(s[0] - HDR - s[1] for s in segs)
        hdr_foot = sum(HDR + s[1] for s in segs)
        self.assertEqual({s[3] for s in segs}, {3}, "segments of format v3 only")
        # one record per file (a spill racing the file's own write may leave one more)
        self.assertGreaterEqual(nrec, self.N)
        self.assertLessEqual(nrec, self.N * 1.01, "%d segments" % len(segs))
        print("\n  [small] %d files, %d bytes live, %d evicted by hand; %d segments: data "
              "area %.4fx live, whole %.4fx live (header+footer %.4fx)"
              % (self.N, live, by_hand, len(segs), data_area / live, total / live,
                 hdr_foot / live), file=sys.stderr)
        self.assertLessEqual(data_area, 1.25 * live)
        self.assertLessEqual(total / live, 1.25 + hdr_foot / live)
        # read back byte for byte (restored from the segments)
        for i, p in enumerate(paths):
            with open(p, "rb") as f:
                got = f.read()
            if got != small_content(i, sizes[i]):
                self.fail("%s: %d bytes read, content differs" % (p, len(got)))
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


class TestSparse(SegCase):
    WRITES = [0, 5 * MiB + 123, 300 * MiB, 300 * MiB + 3 * 4096, 777 * MiB + 4000,
              GiB - 4096]
    LEN = 4096

    def data_ranges(self):
        """Page-rounded, merged ranges tmpfs holds for WRITES."""
        r = []
        for off in sorted(self.WRITES):
            a, b = off // PAGE * PAGE, (off + self.LEN + PAGE - 1) // PAGE * PAGE
            if r and a <= r[-1][1]:
                r[-1][1] = max(r[-1][1], b)
            else:
                r.append([a, b])
        return r

    def test_sparse_1g_file(self):
        self.tier_mount("64M", chunk_size="4M")
        p = os.path.join(self.mnt, "sparse")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.ftruncate(fd, GiB)
            for i, off in enumerate(self.WRITES):
                os.pwrite(fd, bytes([i + 1]) * self.LEN, off)
        finally:
            os.close(fd)
        self.evict(p)
        st = self.state(p)
        self.assertEqual(st["hot"], 0, st)
        segs = segments(self.cold)
        cold = sum(s[0] for s in segs)
        written = len(self.WRITES) * self.LEN
        print("\n  [sparse] 1 GiB file, %d bytes written: %d bytes in %d segment(s)"
              % (written, cold, len(segs)), file=sys.stderr)
        self.assertLessEqual(cold, 1.5 * written + 64 * KiB * len(self.WRITES))

        # restore and compare
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            self.assertEqual(os.fstat(fd).st_size, GiB)
            want = {}
            for i, off in enumerate(self.WRITES):
                want[off] = bytes([i + 1]) * self.LEN
            for off in range(0, GiB, 4 * MiB):
                got = os.pread(fd, 4 * MiB, off)
                self.assertEqual(len(got), 4 * MiB)
                exp = bytearray(4 * MiB)
                for w, b in want.items():
                    lo, hi = max(w, off), min(w + len(b), off + 4 * MiB)
                    if lo < hi:
                        exp[lo - off:hi - off] = b[lo - w:hi - w]
                if got != bytes(exp):
                    self.fail("wrong bytes in [%d, %d)" % (off, off + 4 * MiB))
            # read once: straight from the segments (admission); a warm
            # brings it into RAM
            self.assertEqual(self.state(p)["hot"], 0)
            self.warm(p)
            harness.wait_until(lambda: self.state(p)["cold"] == 0, 20, "restore")
            # holes came back as holes: SEEK_DATA/SEEK_HOLE agree with the writes
            got_ranges = []
            pos = 0
            while True:
                try:
                    d = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:
                    break
                h = os.lseek(fd, d, os.SEEK_HOLE)
                got_ranges.append([d, h])
                pos = h
                if h >= GiB:
                    break
            self.assertEqual(got_ranges, self.data_ranges())
        finally:
            os.close(fd)
        # and tmpfs holds only those pages
        blocks = sum(os.stat(os.path.join(self.m.hot_dir, n)).st_blocks * 512
                     for n in self.m.hot_files())
        self.assertLessEqual(blocks, sum(b - a for a, b in self.data_ranges()))
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


if __name__ == "__main__":
    harness.main()
