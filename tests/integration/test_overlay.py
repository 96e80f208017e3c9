#!/usr/bin/env python3
"""Writes over cold data without restoring it (overlays, tier/chain/chain.c).

A file bigger than the hot tier is written, spilled, and then written into
at random (4 KiB pages, odd sizes, unaligned) while the evictor spills and
drops it: every read is checked against an in-memory model, the chunks
written are never restored whole (the stats say so), what is spilled is
the written blocks, not the chunks, and the file survives a remount, an
evict-all, a kill -9 (hot_dir kept, and wiped: fsync'd bytes only) and
spillway-fsck. Chains are folded past their bound while read and written;
truncate, punch, zero-range and whole-chunk overwrites work across them;
the same on S3.

    python3 tests/integration/test_overlay.py --build BUILD
"""

import os
import random
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import DurCase  # noqa: E402
from lib.fsx import FsxRun, find_fsx  # noqa: E402
from lib.s3 import S3Case  # noqa: E402
from lib.tier import TierCase, file_state, stats_of  # noqa: E402

MiB = 1 << 20
CHUNK = MiB  # the tests' chunk_size
PAGE = 4096


def evict(path):
    os.setxattr(path, "user.spillway.evict", b"1")


class Model:
    """A file on the mount and its expected bytes."""

    def __init__(self, path, size, seed):
        self.path = path
        self.rnd = random.Random(seed)
        self.ref = bytearray(self.rnd.randbytes(size))
        with open(path, "wb") as f:
            f.write(self.ref)
        self.fd = os.open(path, os.O_RDWR)
        self.written = 0

    def write(self, off, data):
        assert os.pwrite(self.fd, data, off) == len(data)
        end = off + len(data)
        if end > len(self.ref):
            self.ref.extend(bytes(end - len(self.ref)))
        self.ref[off:end] = data
        self.written += len(data)

    def check(self, off, n, what=""):
        got = os.pread(self.fd, n, off)
        want = bytes(self.ref[off:off + n])
        if got != want:
            bad = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
                if len(got) == len(want) else min(len(got), len(want))
            raise AssertionError("%s: bytes [%d, %d) differ at %d (got %d bytes)"
                                 % (what, off, off + n, off + bad, len(got)))

    def random_ops(self, n, evict_every=0, sizes=(1, 100, PAGE, 5000, 2 * PAGE, 3 * PAGE + 7)):
        for i in range(n):
            off = self.rnd.randrange(0, len(self.ref) - 4 * PAGE)
            ln = self.rnd.choice(sizes)
            if self.rnd.random() < 0.6:
                if self.rnd.random() < 0.5:
                    off -= off % PAGE
                self.write(off, self.rnd.randbytes(ln))
            else:
                self.check(off, ln, "op %d" % i)
            if evict_every and i % evict_every == evict_every - 1:
                evict(self.path)

    def check_all(self, what):
        with open(self.path, "rb") as f:
            got = f.read()
        if got != bytes(self.ref):
            bad = next((i for i in range(min(len(got), len(self.ref)))
                        if got[i] != self.ref[i]), min(len(got), len(self.ref)))
            raise AssertionError("%s: file differs from the model at byte %d (%d vs %d bytes)"
                                 % (what, bad, len(got), len(self.ref)))

    def close(self):
        os.close(self.fd)


def ovl(st):
    return st["overlay"]


class OverlayTest(TierCase):
    timeout = 300

    def test_random_writes_over_cold_file(self):
        """24 MiB through a 16 MiB tier: random writes go over the cold
        chunks; no chunk is restored for a write, the bytes spilled are the
        pages written (not 1 MiB chunks), and every read is right. (With
        admit=always: the model's random reads read directly, never bringing
        a chunk in; with the admission filter a random re-read of a chunk
        would, which is not what this counts.)"""
        self.tier_mount(hot_size="16M", chunk_size="1M", admit="always")
        m = Model(self.p("f"), 24 * MiB, seed=1)
        evict(m.path)
        self.assertEqual(file_state(m.path)["cold"], 24)
        s0 = self.stats()
        m.random_ops(3000, evict_every=300, sizes=(PAGE,))
        os.fsync(m.fd)
        s1 = self.stats()
        writes = ovl(s1)["writes"] - ovl(s0)["writes"]
        spilled = s1["spilled"]["bytes"] - s0["spilled"]["bytes"]
        restored = s1["restored"]["bytes"] - s0["restored"]["bytes"]
        sys.stderr.write("\n  [overlay] %d writes over cold data, %d bytes written, spilled %d "
                         "(%.1fx), restored %d, filled %d\n"
                         % (writes, m.written, spilled, spilled / m.written, restored,
                            ovl(s1)["fill_bytes"]))
        self.assertGreater(writes, 1000)
        self.assertGreater(ovl(s1)["spills"], 0)
        # whole-chunk spills of every written chunk would be 1 MiB per write
        # between evictions: ~250x the bytes written; overlays spill pages
        self.assertLess(spilled, 8 * m.written)
        # a page write restores nothing: the random reads read directly
        self.assertLess(restored, 2 * MiB)
        m.check_all("after random writes")
        # the human view says what happened
        spillctl = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "mount-helpers", "spillctl")
        out = subprocess.run([sys.executable, spillctl, "stats", self.mnt], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=30).stdout.decode()
        self.assertRegex(out, r"overlay +\d+ writes went over cold data", out)
        evict(m.path)
        m.check_all("after evict")
        m.close()

    def test_odd_sizes_and_concurrent_reads(self):
        """Unaligned writes of every size keep the bytes around them, read
        back from RAM, from the chain or both at once."""
        prom = os.path.join(self.tmpdir(), "m.prom")
        self.tier_mount(hot_size="16M", chunk_size="1M", metrics=prom, metrics_interval="200ms")
        m = Model(self.p("f"), 20 * MiB, seed=2)
        evict(m.path)
        m.random_ops(4000, evict_every=150)
        m.check_all("after odd writes")

        def overlay_writes():  # the Prometheus file counts them too
            try:
                with open(prom) as f:
                    for line in f:
                        if line.startswith("spillway_overlay_writes_total "):
                            return int(float(line.split()[1]))
            except OSError:
                pass
            return 0
        self.poll(lambda: overlay_writes() > 1000, 10, "the metrics file's overlay writes")
        # a write past the end of the file over a cold last chunk
        m.write(len(m.ref) + 3000, b"tail" * 1000)
        evict(m.path)
        m.check_all("after growing")
        m.close()

    def test_rewrite_in_place_replaces_records(self):
        """A cold file rewritten whole, a piece at a time (128 KiB FUSE
        writes, so each goes over its chunk's cold copy): each chunk is
        spilled whole again and its old records die; what the segments
        hold live stays the file's size, not twice it."""
        self.tier_mount(hot_size="16M", chunk_size="1M")
        m = Model(self.p("f"), 8 * MiB, seed=8)
        os.fsync(m.fd)
        evict(m.path)
        for off in range(0, 8 * MiB, 128 * 1024):
            m.write(off, m.rnd.randbytes(128 * 1024))
        os.fsync(m.fd)
        evict(m.path)
        st = self.stats()
        self.assertGreater(ovl(st)["writes"], 0)
        self.assertLessEqual(st["segments"]["live_bytes"], 9 * MiB, st["segments"])
        m.check_all("after the rewrite")
        m.close()

    def test_chain_folds_past_its_bound(self):
        """One chunk spilled page by page: its chain passes CHAIN_MAX (16)
        records and is folded, while it is read and written."""
        self.tier_mount(hot_size="16M", chunk_size="1M")
        m = Model(self.p("f"), 4 * MiB, seed=3)
        evict(m.path)
        for i in range(60):
            off = MiB + m.rnd.randrange(0, MiB // PAGE) * PAGE
            m.write(off, m.rnd.randbytes(PAGE))
            os.fsync(m.fd)  # each write its own record
            evict(m.path)
            m.check(MiB + m.rnd.randrange(0, MiB - 9000), 9000, "read %d" % i)
        st = self.stats()
        self.assertGreater(ovl(st)["folds"], 0)
        self.assertGreaterEqual(ovl(st)["spills"], 40)
        m.check_all("after folds")
        # the same state after a remount: the chain comes back from the journal
        m.close()

    def test_truncate_punch_overwrite_across_chain(self):
        self.tier_mount(hot_size="16M", chunk_size="1M")
        m = Model(self.p("f"), 6 * MiB, seed=4)
        evict(m.path)
        m.random_ops(400, sizes=(PAGE, 100))
        os.fsync(m.fd)
        evict(m.path)
        m.random_ops(200, sizes=(PAGE, 5000))  # chained chunks, part in RAM
        # punch ranges across chains (FUSE passes no zero-range)
        FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]

        def fallocate(mode, off, ln):
            if libc.fallocate(m.fd, mode, off, ln) != 0:
                raise OSError(ctypes.get_errno(), "fallocate")
            m.ref[off:off + ln] = bytes(ln)

        fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MiB + 5000, 70000)
        fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * MiB - 100, 300000)
        m.check_all("after punches")
        evict(m.path)
        m.random_ops(100, sizes=(PAGE,))
        # truncate inside a chained chunk, then grow again
        os.ftruncate(m.fd, 4 * MiB + 12345)
        del m.ref[4 * MiB + 12345:]
        m.check_all("after truncate")
        evict(m.path)
        os.ftruncate(m.fd, 5 * MiB)
        m.ref.extend(bytes(5 * MiB - len(m.ref)))
        m.check_all("after growing back")
        # a whole-chunk overwrite drops the chain
        m.write(2 * MiB, m.rnd.randbytes(MiB))
        evict(m.path)
        m.check_all("after whole overwrite")
        m.close()


class OverlayFsxTest(TierCase):
    """spw_fsx (every read checked against its model) through a 16 MiB tier,
    files up to 8 MiB, in both restore modes, with holes and dense (-D:
    zeros written where a file would get holes: a dense file's chunks are
    all data, so its cold chunks are written over, not punched away)."""
    timeout = 600

    def run_fsx(self, restore, dense, seed):
        self.tier_mount(hot_size="16M", chunk_size="1M", restore=restore,
                        min_spill_size="2M")
        good = self.tmpdir()
        run = FsxRun(self, find_fsx(), self.mnt, seed, 6000, "8M",
                     False, good, extra=["-D"] if dense else [])
        ops = run.finish(240)
        self.assertGreaterEqual(ops, 6000)
        st = self.stats()
        self.assertGreater(ovl(st)["writes"], 0, "no write went over cold data")
        self.assertEqual(st["errors"]["io"], 0)
        self.assertEqual(st["errors"]["crc"], 0)

    def test_lazy_dense(self):
        self.run_fsx("lazy", True, 31)

    def test_open_dense(self):
        self.run_fsx("open", True, 32)

    def test_lazy_holes(self):
        self.run_fsx("lazy", False, 33)

    def test_open_holes(self):
        self.run_fsx("open", False, 34)


class OverlayDurabilityTest(DurCase):
    timeout = 300

    def fsck(self, state):
        """spillway-fsck --verify-data finds the state clean (the tiers file
        names the cold directory; every record of every chain is read)."""
        fsck = os.path.join(harness.BUILD_DIR, "spillway-fsck")
        r = subprocess.run([fsck, "--verify-data", state], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, "spillway-fsck disagrees:\n" + out)
        self.assertRegex(out.splitlines()[-1], r"verified: clean$", out)
        return out

    def run_crash(self, wipe_hot):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, min_spill_size="1M")
        m = self.cmount(hot, opts, "ovl-a", hot_size="16M")
        model = Model(m.path("f"), 12 * MiB, seed=5 if wipe_hot else 6)
        os.fsync(model.fd)
        evict(model.path)
        for rnd in range(6):
            model.random_ops(150, sizes=(PAGE,))
            os.fsync(model.fd)  # acknowledged: must survive
            evict(model.path)
        model.random_ops(80, sizes=(PAGE,))
        os.fsync(model.fd)
        synced = bytes(model.ref)
        # writes in flight with the evictor spilling overlays: then kill -9
        model.random_ops(200, evict_every=50, sizes=(PAGE,))
        os.close(model.fd)
        m.kill9()
        if wipe_hot:
            shutil.rmtree(hot)
        m2 = self.cmount(hot, opts, "ovl-b", hot_size="16M")
        with open(m2.path("f"), "rb") as f:
            got = f.read()
        self.assertEqual(len(got), len(synced))
        if wipe_hot:
            # a reboot: RAM is gone, what was fsync'd is what comes back
            # (pages written later may be back too, where a spill took them)
            new = bytes(model.ref)
            for off in range(0, len(got), PAGE):
                g = got[off:off + PAGE]
                if g != synced[off:off + PAGE] and g != new[off:off + PAGE]:
                    self.fail("page at %d is neither the fsync'd nor the newer bytes" % off)
        else:
            # hot_dir kept: every acknowledged write is there
            self.assertEqual(got, bytes(model.ref), "kill -9 with hot_dir kept lost writes")
        self.assertEqual(m2.unmount_clean(), 0)
        self.fsck(state)

    def test_chain_base_compacted_while_read_and_written(self):
        """Chunk 0 written over (a chain on its base); chunks 1-3, in the
        same segment, rewritten whole: the segment is left a quarter live
        and GC compacts it, moving the chain's base, while chunk 0 is read
        and written. Then kill -9 (hot_dir kept): every byte is back, and
        fsck agrees."""
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)  # min_spill_size=4M: the 4 chunks, one segment
        m = self.cmount(hot, opts, "ovl-gc-a", hot_size="16M")
        model = Model(m.path("f"), 4 * MiB, seed=9)
        os.fsync(model.fd)
        evict(model.path)
        for i in range(20):
            model.write(model.rnd.randrange(0, MiB // PAGE) * PAGE, model.rnd.randbytes(PAGE))
        os.fsync(model.fd)
        evict(model.path)
        c0 = stats_of(m.mnt)["segments"]["compacted"]
        for c in range(1, 4):
            model.write(c * MiB, model.rnd.randbytes(MiB))
        os.fsync(model.fd)
        evict(model.path)
        rounds = 0
        while stats_of(m.mnt)["segments"]["compacted"] == c0:
            rounds += 1
            self.assertLess(rounds, 20000, "no compaction of the chain's base segment")
            model.write(model.rnd.randrange(0, MiB // PAGE) * PAGE, model.rnd.randbytes(PAGE))
            model.check(model.rnd.randrange(0, MiB - 9000), 9000, "round %d" % rounds)
            if rounds % 50 == 0:
                os.fsync(model.fd)
                evict(model.path)
        for i in range(50):
            model.write(model.rnd.randrange(0, MiB // PAGE) * PAGE, model.rnd.randbytes(PAGE))
        os.fsync(model.fd)
        model.check_all("after the compaction")
        os.close(model.fd)
        m.kill9()
        m2 = self.cmount(hot, opts, "ovl-gc-b", hot_size="16M")
        with open(m2.path("f"), "rb") as f:
            self.assertEqual(f.read(), bytes(model.ref), "after kill -9")
        self.assertEqual(m2.unmount_clean(), 0)
        self.fsck(state)

    def test_kill9_during_overlay_spills(self):
        self.run_crash(wipe_hot=False)

    def test_reboot_during_overlay_spills(self):
        self.run_crash(wipe_hot=True)


class OverlayS3Test(S3Case):
    timeout = 300

    def test_random_writes_over_s3(self):
        srv = self.s3server()
        m = self.s3_mount(srv, hot_size="16M", chunk_size="1M")
        model = Model(m.path("f"), 20 * MiB, seed=7)
        evict(model.path)
        s0 = stats_of(m.mnt)
        model.random_ops(800, evict_every=200, sizes=(PAGE, 100, 5000))
        os.fsync(model.fd)
        s1 = stats_of(m.mnt)
        self.assertGreater(ovl(s1)["writes"] - ovl(s0)["writes"], 300)
        # a whole-chunk restore per write would be hundreds of MiB
        self.assertLess(s1["restored"]["bytes"] - s0["restored"]["bytes"], 4 * MiB)
        model.check_all("over s3")
        evict(model.path)
        model.check_all("over s3, evicted")
        model.close()


if __name__ == "__main__":
    harness.main()
