#!/usr/bin/env python3
"""Admission to RAM both ways (tier/admit, DESIGN section 15), on real mounts.

Reads: a cold file read once is read from its segments and stays cold
(nothing restored, no RAM used); read again it comes into RAM, and once it
is all in RAM its opens are passed through. Objects read each through its
own open (as Ray restores them from one spill file) are one access. A
random reader that keeps coming back to a chunk (8 reads) brings it in.

Writes: above spill_threshold a streaming writer's file is written around:
its chunks are spilled first and let go, the hot data stays in RAM, and
the file is cold soon after its last close. Below the threshold writes stay
in RAM. A kill -9 while a stream is written around loses nothing
acknowledged. spw_fsx with streams and scans (-A) on a tiny tier, with and
without passthrough readers held across reopens; overwrites and truncates
racing a write-around.

    python3 tests/integration/test_admission.py --build BUILD
"""

import json
import os
import random
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import DurCase  # noqa: E402
from lib.data import KiB, MiB, content, open_uncached, run_threads, write_content  # noqa: E402
from lib.fsx import tiny_tier  # noqa: E402
from lib.tier import TierCase  # noqa: E402


def read_once(path, size, bs=MiB):
    """Read path front to back through one fresh open (its cached pages
    dropped first, the kernel's readahead on): what a restore does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out, off = [], 0
        while off < size:
            b = os.read(fd, bs)
            if not b:
                break
            out.append(b)
            off += len(b)
        return b"".join(out)
    finally:
        os.close(fd)


class AdmitCase(TierCase):
    timeout = 120

    def tier_mount(self, hot_size="64M", chunk_size="1M", cold=None, **opts):
        # the budget stays hot_size: what is in RAM here is the filter's
        # doing, not the machine's memory pressure (other tests, sanitizer
        # builds) shrinking the tier and the horizon with it
        opts.setdefault("mem_pressure", "off")
        return super().tier_mount(hot_size, chunk_size, cold, **opts)

    def restored(self):
        return self.stats()["restored"]["bytes"]

    def check_once(self, p, tag, size):
        got = read_once(p, size)
        self.assertEqual(len(got), size)
        self.assertTrue(got == content(tag, 0, size), "%s: wrong bytes" % p)


class TestReadOnce(AdmitCase):

    def test_read_once_stays_cold_read_again_comes_in(self):
        self.tier_mount(hot_size="64M", chunk_size="4M", min_spill_size="4M",
                        log_level="debug")
        size = 24 * MiB + 12345
        p = self.p("once")
        write_content(p, 3, size)
        self.evict(p)
        nch = -(-size // (4 * MiB))
        self.assertEqual(self.state(p)["cold"], nch)
        r0, s0 = self.restored(), self.stats()
        self.check_once(p, 3, size)
        s1 = self.stats()
        self.assertEqual(s1["restored"]["bytes"], r0, "a read once restored: %s" % s1)
        self.assertGreater(s1["direct_reads"], s0["direct_reads"])
        self.assertEqual(self.state(p)["cold"], nch)
        self.assertEqual(s1["hot"]["used"], 0, s1["hot"])
        # read again: it comes into RAM, all of it
        self.check_once(p, 3, size)
        try:
            self.poll(lambda: self.state(p)["hot"] == nch, 20, "the re-read file in RAM")
        except AssertionError as e:
            admits = [ln for ln in self.m.log_text(400).splitlines() if "admit" in ln]
            raise AssertionError("%s: state %s\nstats %s\nthe filter's verdicts:\n%s"
                                 % (e, self.state(p), json.dumps(self.stats()),
                                    "\n".join(admits[-40:])))
        self.assertGreaterEqual(self.restored() - r0, size - 4 * MiB)
        # a third open of a file all in RAM is passed through (when it can be)
        pt0 = self.stats()["passthrough"]
        self.check_once(p, 3, size)
        pt1 = self.stats()["passthrough"]
        if pt1["on"]:
            self.assertEqual(pt1["opens"], pt0["opens"] + 1, pt1)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_objects_each_through_its_own_open(self):
        """Ray's restore: one spill file, each object read through its own
        open, at unaligned offsets: every object is one access. (The kernel
        keeps the pages its readahead took past an object, so the next
        object's reads start after them; should it have let them go, the
        start of the next object may be taken for a re-read of that
        readahead: at most one chunk per object boundary.)"""
        self.tier_mount(hot_size="64M", chunk_size="4M", min_spill_size="4M",
                        log_level="debug")
        sizes = [10 * MiB + 123, 7 * MiB + 4000, 3 * MiB + 1, 12 * MiB + 77]
        size = sum(sizes)
        p = self.p("fused")
        write_content(p, 5, size)
        self.evict(p)
        r0 = self.restored()
        off = 0
        for n in sizes:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.lseek(fd, off, os.SEEK_SET)
                got = bytearray()
                while len(got) < n:
                    b = os.read(fd, n - len(got))
                    self.assertTrue(b, "short read at %d" % (off + len(got)))
                    got += b
            finally:
                os.close(fd)
            self.assertTrue(bytes(got) == content(5, off, n), "object at %d" % off)
            off += n
        st = self.stats()
        self.assertLessEqual(st["restored"]["bytes"] - r0, (len(sizes) - 1) * 4 * MiB, st)
        self.assertGreaterEqual(st["admission"]["direct_read_bytes"],
                                size - (len(sizes) - 1) * 4 * MiB, st)

    def test_random_rereads_of_a_chunk_bring_it_in(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="4M")
        size = 64 * MiB
        p = self.p("rnd")
        write_content(p, 7, size)
        self.evict(p)
        fd = open_uncached(p)
        try:
            # jumps of more than 16 MiB (nearer ones may be a stream's
            # readahead out of order): a random reader; chunk 9 read 7
            # times (pages 64 KiB apart), others once: all from the segments
            offs = [50 * MiB + 5, 13 * MiB]
            for k in range(7):
                offs += [40 * MiB + k * 2 * MiB + k * 8 * KiB, 9 * MiB + k * 64 * KiB]
            offs.append(60 * MiB)
            for off in offs:
                self.assertEqual(os.pread(fd, 4 * KiB, off), content(7, off, 4 * KiB))
            st = self.state(p)
            self.assertEqual(st["hot"] + st["restoring"], 0, st)
            # its 8th read brings chunk 9 in
            off = 9 * MiB + 900 * KiB
            self.assertEqual(os.pread(fd, 4 * KiB, off), content(7, off, 4 * KiB))
            self.poll(lambda: self.state(p)["restoring"] == 0, 10, "chunk 9's rest")
        finally:
            os.close(fd)
        self.assertEqual(self.state(p)["hot"], 1, self.state(p))

    def test_open_brings_back_what_was_read_before(self):
        """restore=open with the filter: an open brings back in the
        background what was read before (a working set opened again), not
        the file's other chunks."""
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="4M", restore="open")
        p = self.p("ws")
        write_content(p, 8, 16 * MiB)
        self.evict(p)
        fd = os.open(p, os.O_RDONLY)
        os.close(fd)
        st = self.state(p)
        self.assertEqual((st["hot"], st["restoring"]), (0, 0), "a first open restored: %s" % st)
        got = read_once(p, 8 * MiB)
        self.assertTrue(got == content(8, 0, 8 * MiB))
        self.assertEqual(self.state(p)["hot"], 0)
        fd = os.open(p, os.O_RDONLY)
        try:
            # the chunks read before: the first 8, and the 9th when the
            # kernel's readahead went past the 8 MiB read
            self.poll(lambda: (lambda st: st["hot"] >= 8 and st["restoring"] == 0)(
                self.state(p)), 20, "the chunks read before back after the reopen")
        finally:
            os.close(fd)
        st = self.state(p)
        self.assertIn((st["hot"], st["cold"]), ((8, 8), (9, 7)), st)
        self.assertContent(p, 8, 16 * MiB)

    def test_admit_always_brings_every_read_in(self):
        self.tier_mount(hot_size="64M", chunk_size="4M", min_spill_size="4M", admit="always",
                        restore="lazy")
        size = 16 * MiB
        p = self.p("always")
        write_content(p, 9, size)
        self.evict(p)
        self.check_once(p, 9, size)
        self.poll(lambda: self.state(p)["hot"] == 4, 20, "every chunk read in RAM")


class TestWriteAround(AdmitCase):

    def stream(self, p, tag, size, bs=MiB):
        write_content(p, tag, size, bs=bs)

    def test_stream_under_pressure_goes_around_hot_data_stays(self):
        self.tier_mount(hot_size="32M", chunk_size="1M", min_spill_size="4M")
        hot = self.p("hot")
        write_content(hot, 1, 8 * MiB)
        self.assertContent(hot, 1, 8 * MiB)
        s0 = self.stats()
        big = self.p("stream")
        self.stream(big, 2, 96 * MiB)
        # cold soon after its close: nothing of it dirty or in RAM
        self.poll(lambda: (lambda st: st["dirty"] + st["hot"] == 0)(self.state(big)), 30,
                  "the written-around file cold after its close (%s)" % self.state(big))
        # the stream went around RAM, not through the hot data; but when its
        # writer waits for room (a slow or busy disk: CI's parallel tests)
        # the evictor takes the oldest dirty chunks too, no bet on the
        # written-around ones alone (evict.c): at most one segment's worth
        # (min_spill_size, 4 chunks) of the hot file per pressure episode
        # (a writer's wait; one more for the hard watermark), never more
        st = self.state(hot)
        s1 = self.stats()
        waits = s1["write_waits"] - s0["write_waits"]
        self.assertEqual(st["hot"] + st["cold"], 8, st)
        self.assertLessEqual(st["cold"], 4 * (1 + waits),
                             "the hot file was pushed out: %s after %d waits" % (st, waits))
        self.assertGreaterEqual(s1["spilled"]["bytes"] - s0["spilled"]["bytes"], 96 * MiB)
        self.assertLessEqual(s1["hot"]["used"], s1["hot"]["limit"])
        self.assertContent(big, 2, 96 * MiB)
        self.assertContent(hot, 1, 8 * MiB)
        self.assertEqual(s1["errors"], {"io": 0, "crc": 0})

    def test_below_threshold_writes_stay_in_ram(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="4M")
        p = self.p("small")
        self.stream(p, 4, 16 * MiB)
        st = self.state(p)
        self.assertEqual((st["hot"], st["cold"]), (16, 0), st)
        self.assertEqual(self.stats()["spilled"]["bytes"], 0)

    def test_overwrites_and_truncates_racing_a_write_around(self):
        """One thread streams a file under pressure; another overwrites
        ranges the stream has passed, and truncates a second streamed file
        back and forth. Every byte ends as the model says."""
        self.tier_mount(hot_size="24M", chunk_size="1M", min_spill_size="2M")
        a, b = self.p("a"), self.p("b")
        size = 64 * MiB
        ref = bytearray(content(11, 0, size))
        progress = [0]
        lock = threading.Lock()
        done = threading.Event()
        os.close(os.open(a, os.O_CREAT | os.O_WRONLY, 0o644))

        def streamer():
            fd = os.open(a, os.O_WRONLY)
            try:
                for off in range(0, size, MiB):
                    self.assertEqual(os.pwrite(fd, content(11, off, MiB), off), MiB)
                    with lock:
                        progress[0] = off + MiB
            finally:
                os.close(fd)
                done.set()

        def overwriter():
            rng = random.Random(3)
            fd = os.open(a, os.O_WRONLY)
            try:
                while not done.is_set():
                    with lock:
                        upto = progress[0]
                    if upto < 2 * MiB:
                        continue
                    off = rng.randrange(0, upto - 64 * KiB)
                    n = rng.choice((4 * KiB, 60 * KiB, 1))
                    data = rng.randbytes(n)
                    with lock:  # the stream is past it: the model's order is ours
                        self.assertEqual(os.pwrite(fd, data, off), n)
                        ref[off:off + n] = data
            finally:
                os.close(fd)

        def truncater():
            rng = random.Random(4)
            fd = os.open(b, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
            want = 0
            try:
                for rnd in range(6):
                    for off in range(0, 12 * MiB, MiB):
                        os.pwrite(fd, content(20 + rnd, off, MiB), off)
                    want = rng.randrange(1, 12 * MiB)
                    os.ftruncate(fd, want)
                    got = os.pread(fd, 64 * KiB, max(0, want - 64 * KiB))
                    exp = content(20 + rnd, max(0, want - 64 * KiB), min(64 * KiB, want))
                    self.assertEqual(got, exp, "round %d after truncate to %d" % (rnd, want))
                self.assertEqual(os.fstat(fd).st_size, want)
            finally:
                os.close(fd)

        run_threads([streamer, overwriter, truncater])
        got = read_once(a, size)
        self.assertEqual(len(got), size)
        if got != bytes(ref):
            i = next(i for i in range(size) if got[i] != ref[i])
            self.fail("a: wrong byte at %d" % i)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


class TestWriteAroundKill9(DurCase):
    timeout = 180

    def test_kill9_while_written_around(self):
        """Acknowledged bytes of a stream written around survive a kill -9
        in the middle of it (its spills in flight), and so does all of an
        fsync'd file written around before it."""
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, min_spill_size="2M")
        m = self.cmount(hot, opts, "wa", hot_size="24M")
        synced = m.path("synced")
        fd = os.open(synced, os.O_CREAT | os.O_WRONLY, 0o644)
        for off in range(0, 40 * MiB, MiB):
            os.pwrite(fd, content(30, off, MiB), off)
        os.fsync(fd)
        os.close(fd)
        p = m.path("stream")
        acked = [0]
        started = threading.Event()

        def writer():
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                off = 0
                while True:
                    if os.pwrite(fd, content(31, off, MiB), off) != MiB:
                        return
                    off += MiB
                    acked[0] = off
                    if off >= 24 * MiB:
                        started.set()
            except OSError:
                return  # the daemon is gone
            finally:
                started.set()
                try:
                    os.close(fd)
                except OSError:
                    pass

        th = threading.Thread(target=writer, daemon=True)
        th.start()
        self.assertTrue(started.wait(60), "the stream did not get going")
        self.assertGreater(self.stats_of(m)["spilled"]["bytes"], 0)
        m.kill9()
        th.join(30)
        self.assertFalse(th.is_alive())
        n = acked[0]
        self.assertGreaterEqual(n, 24 * MiB)
        m2 = self.cmount(hot, opts, "wa-after", hot_size="24M")
        size = os.stat(m2.path("stream")).st_size
        self.assertGreaterEqual(size, n, "acknowledged %d bytes, the file has %d" % (n, size))
        got = read_once(m2.path("stream"), n)
        self.assertTrue(got == content(31, 0, n), "the acknowledged bytes came back wrong")
        self.assertTrue(read_once(m2.path("synced"), 40 * MiB) == content(30, 0, 40 * MiB))
        self.assertEqual(self.stats_of(m2)["lost_files"], 0)

    def stats_of(self, m):
        import json
        return json.loads(os.getxattr(m.mnt, "user.spillway.stats"))


class TestAdmissionFsx(harness.SpwTestCase):
    """spw_fsx with streams and scans (-A) against a tiny hot tier: reads
    once, re-reads, write-arounds, truncates and overwrites of streamed
    files, in one seeded sequence checked byte for byte; -P holds a
    read-only open across reopens (passthrough readers beside writers)."""
    timeout = 400

    def run_fsx(self, seeds, extra):
        # extents=off: the streams stay on the daemon's path, where
        # admission writes them around and reads them once (test_fsx and
        # test_extents run spw_fsx with extents)
        st = tiny_tier(self, [(seed, 6000, False, ["-A"] + extra) for seed in seeds],
                       ["restore=lazy", "extents=off"], timeout=200)
        self.assertGreater(st["direct_reads"], 0)
        sys.stderr.write("\n  [fsx -A %s] direct reads %d, restored %d chunks\n"
                         % (" ".join(extra), st["direct_reads"], st["restored"]["chunks"]))

    def test_streams_and_scans(self):
        self.run_fsx((41, 42), [])

    def test_streams_and_scans_passthrough_readers(self):
        self.run_fsx((43,), ["-P"])


if __name__ == "__main__":
    harness.main()
