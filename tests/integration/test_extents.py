#!/usr/bin/env python3
"""test_extents - a stream under pressure lives in one file on a cold
directory, served by the kernel (tier/extent, DESIGN section 16).

On real mounts with a small hot tier: a file created while streams are
written around (or RAM is above low_watermark) gets an extent, named by inode
(never by path), 0600 in a 0700 folder, passed through to the kernel, sealed
at its last writer's close; its bytes are right through the kernel and
through the daemon; truncate, unlink, O_TRUNC and fallocate keep the model;
kill -9 with a writer in the middle and a wiped hot_dir lose nothing the
kernel took (fsync'd, closed, or written and not yet closed); an extent
written when the daemon died is recovered by its size on disk and sealed at
mount; a flipped byte is EIO on a daemon read, never wrong bytes; spw_fsx
runs on extents; extents=off keeps the old path.
"""
import ctypes
import errno
import hashlib
import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.fsx import FsxRun, find_fsx  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402

MiB = 1 << 20


def ext(mnt):
    return stats_of(mnt)["extents"]


def pattern(seed, size):
    return random.Random(seed).randbytes(size)


def write(path, data, fsync=False):
    with open(path, "wb") as f:
        for o in range(0, len(data), MiB):
            f.write(data[o:o + MiB])
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def read(path):
    with open(path, "rb") as f:
        return f.read()


def extent_files(cold, path=None):
    """The extents in cold/extents (of path's inode only, with path)."""
    d = os.path.join(cold, "extents")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    if path is None:
        return names
    ino = path if isinstance(path, int) else os.stat(path).st_ino
    return [n for n in names if int(n.split("-")[0], 16) == ino]


class ExtentCase(harness.SpwTestCase):
    timeout = 300

    def setUp(self):
        super().setUp()
        base = self.tmpdir()
        self.hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        self.cold = os.path.join(base, "cold")
        os.mkdir(self.cold)
        self.opts = ["nvme=" + self.cold, "state_dir=" + os.path.join(base, "state"),
                     "mem_pressure=off"]

    def start(self, extra=(), tag="ext", hot_size="32M"):
        on = [] if any(o.startswith("extents=") for o in extra) else ["extents=on"]
        # sealed at the last writer's close, what these tests follow
        # (TestSealDelay: the default, later)
        if not any(o.startswith("seal_delay=") for o in extra):
            on.append("seal_delay=0")
        return self.mount(hot_size=hot_size, opts=self.opts + on + list(extra), hot_dir=self.hot,
                          tag=tag)

    def pressure(self, m, name="fill", sealed=True):
        """A stream bigger than the hot tier: it moves into an extent as RAM
        fills (or is written around), so the files created next are streams
        under pressure."""
        e0 = ext(m.mnt)["created"]
        a0 = stats_of(m.mnt)["admission"]["written_around_files"]
        write(m.path(name), pattern(99, 48 * MiB))
        self.assertTrue(ext(m.mnt)["created"] > e0
                        or stats_of(m.mnt)["admission"]["written_around_files"] > a0,
                        m.log_text(20))
        if sealed and "extent" in file_state(m.path(name)):
            self.wait_sealed(m, m.path(name))  # its release comes after close()

    def wait_sealed(self, m, path):
        harness.wait_until(lambda: file_state(path).get("sealed") == 1, 20,
                           "the daemon sealed %s at its writer's close" % path)

    def assert_extent(self, path):
        st = file_state(path)
        self.assertEqual(st.get("extent"), 1, st)
        self.assertEqual(st["hot"], 0, st)


class TestStreams(ExtentCase):

    def test_stream_under_pressure_is_an_extent(self):
        m = self.start()
        self.assertEqual(ext(m.mnt)["files"], 0, ext(m.mnt))
        self.pressure(m)
        e0 = ext(m.mnt)
        data = pattern(1, 40 * MiB + 4097)
        write(m.path("stream.bin"), data)
        self.wait_sealed(m, m.path("stream.bin"))
        self.assert_extent(m.path("stream.bin"))
        e = ext(m.mnt)
        self.assertEqual(e["files"], e0["files"] + 1, e)
        self.assertGreaterEqual(e["opens"], e0["opens"] + 1, e)  # granted at its open
        self.assertEqual(e["sealed_bytes"] - e0["sealed_bytes"], len(data), e)
        # not in RAM: the hot tier stays within its budget
        self.assertLessEqual(stats_of(m.mnt)["hot"]["used"], 32 * MiB)
        # stored by inode and id, 0600 in a 0700 folder, its bytes as they are
        ino = os.stat(m.path("stream.bin")).st_ino
        names = extent_files(self.cold, ino)
        self.assertEqual(len(names), 1, extent_files(self.cold))
        self.assertNotIn("stream", "".join(extent_files(self.cold)))
        p = os.path.join(self.cold, "extents", names[0])
        self.assertEqual(os.stat(p).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.dirname(p)).st_mode & 0o777, 0o700)
        self.assertEqual(read(p), data)
        # read back through the kernel (passed through), then again
        opens = ext(m.mnt)["opens"]
        self.assertEqual(read(m.path("stream.bin")), data)
        self.assertEqual(ext(m.mnt)["opens"], opens + 1, "reopen: %s" % ext(m.mnt))
        self.assertEqual(os.stat(m.path("stream.bin")).st_size, len(data))
        # an overwrite in place unseals it; the close seals it again
        with open(m.path("stream.bin"), "r+b") as f:
            f.seek(5 * MiB + 3)
            f.write(b"X" * 10000)
        data = data[:5 * MiB + 3] + b"X" * 10000 + data[5 * MiB + 10003:]
        self.wait_sealed(m, m.path("stream.bin"))
        self.assertEqual(read(m.path("stream.bin")), data)
        # a time the application sets stays (cp -p, rsync -t), reads or not
        os.utime(m.path("stream.bin"), ns=(1_000_000_000, 2_000_000_000))
        self.assertEqual(read(m.path("stream.bin")), data)
        self.assertEqual(os.stat(m.path("stream.bin")).st_mtime_ns, 2_000_000_000)
        # unlink: its extent goes with it
        os.unlink(m.path("stream.bin"))
        harness.wait_until(lambda: extent_files(self.cold, ino) == []
                           and ext(m.mnt)["files"] == e0["files"],
                           10, "the extent removed (the kernel's forget is asynchronous)")

    def test_big_stream_moves_into_an_extent_as_ram_fills(self):
        """The first big stream, written while RAM fills: its bytes so far
        move from the hot tier into an extent before the evictor takes them
        (no segment written), the rest goes there too, and the next opens
        are passed through."""
        m = self.start()
        data = pattern(9, 80 * MiB + 77)
        write(m.path("big"), data)
        self.wait_sealed(m, m.path("big"))
        self.assert_extent(m.path("big"))
        st = stats_of(m.mnt)
        self.assertEqual(st["segments"]["written"], 0, st["segments"])
        self.assertEqual(st["extents"]["created"], 1, st["extents"])
        harness.wait_until(lambda: stats_of(m.mnt)["hot"]["used"] == 0, 10, "RAM given back")
        opens = ext(m.mnt)["opens"]
        self.assertEqual(read(m.path("big")), data)
        self.assertEqual(ext(m.mnt)["opens"], opens + 1)
        m.stop()
        m2 = self.start(tag="ext-big2")
        self.assertEqual(read(m2.path("big")), data)

    def test_evict_of_a_big_file_makes_an_extent(self):
        """user.spillway.evict of a big file all in RAM moves it into a
        sealed extent (durable first), not into segments; a small one still
        goes into a segment."""
        m = self.start(hot_size="128M")  # room for both: neither is a stream under pressure
        big, small = pattern(10, 20 * MiB + 5), pattern(11, 2 * MiB)
        write(m.path("big"), big)
        write(m.path("small"), small)
        self.assertNotIn("extent", file_state(m.path("big")))
        for n in ("big", "small"):
            os.setxattr(m.path(n), "user.spillway.evict", b"1")
        self.assertEqual(file_state(m.path("big"))["extent"], 1)
        self.assertEqual(file_state(m.path("big"))["sealed"], 1)
        self.assertNotIn("extent", file_state(m.path("small")))
        self.assertGreater(file_state(m.path("small"))["segments"], 0)
        self.assertEqual(len(extent_files(self.cold, m.path("big"))), 1)
        self.assertEqual(read(m.path("big")), big)
        self.assertEqual(read(m.path("small")), small)
        m.stop()
        m2 = self.start(tag="ext-evict2", hot_size="128M")
        self.assertEqual(read(m2.path("big")), big)
        self.assertEqual(file_state(m2.path("big"))["sealed"], 1)

    def test_truncate_fallocate_and_o_trunc(self):
        m = self.start()
        self.pressure(m)
        data = bytearray(pattern(2, 12 * MiB))
        write(m.path("t"), bytes(data))
        self.wait_sealed(m, m.path("t"))
        os.truncate(m.path("t"), 5 * MiB + 1)
        del data[5 * MiB + 1:]
        self.assertEqual(file_state(m.path("t"))["sealed"], 0)  # changed: not sealed
        self.assertEqual(read(m.path("t")), bytes(data))
        os.truncate(m.path("t"), 7 * MiB)
        data += bytes(2 * MiB - 1)
        self.assertEqual(read(m.path("t")), bytes(data))
        fd = os.open(m.path("t"), os.O_RDWR)
        try:
            os.posix_fallocate(fd, 7 * MiB, MiB)  # grows it
            data += bytes(MiB)
            # punch a hole in the middle (through the daemon: fallocate)
            PUNCH, KEEP = 0x02, 0x01
            libc = ctypes.CDLL(None, use_errno=True)
            self.assertEqual(libc.fallocate(fd, PUNCH | KEEP, ctypes.c_long(MiB),
                                            ctypes.c_long(64 * 1024)), 0)
            data[MiB:MiB + 64 * 1024] = bytes(64 * 1024)
            # SEEK_HOLE finds the punched hole (or a later one), never past EOF
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
            self.assertLessEqual(hole, len(data))
        finally:
            os.close(fd)
        self.wait_sealed(m, m.path("t"))
        self.assertEqual(os.stat(m.path("t")).st_size, len(data))
        self.assertEqual(read(m.path("t")), bytes(data))
        # a truncate to 0 with no opens: the extent goes, the file is an
        # empty file of the hot tier again
        files = ext(m.mnt)["files"]
        os.truncate(m.path("t"), 0)
        self.assertEqual(os.stat(m.path("t")).st_size, 0)
        self.assertNotIn("extent", file_state(m.path("t")))
        self.assertEqual(extent_files(self.cold, m.path("t")), [])
        self.assertEqual(ext(m.mnt)["files"], files - 1)

    def test_extents_off_keeps_the_daemon_path(self):
        m = self.start(extra=["extents=off"])
        self.pressure(m)
        data = pattern(3, 20 * MiB)
        write(m.path("s"), data)
        self.assertEqual(ext(m.mnt)["created"], 0)
        self.assertNotIn("extent", file_state(m.path("s")))
        self.assertNotIn("extent", file_state(m.path("fill")))
        self.assertEqual(read(m.path("s")), data)
        self.assertEqual(extent_files(self.cold), [])


class TestCrashes(ExtentCase):

    def test_kill9_mid_stream_and_wiped_hot_dir(self):
        """fsync'd, closed and still-being-written extents all come back after
        kill -9 and a wiped hot_dir: the kernel's page cache is not the
        daemon's; the open one by its size on disk, sealed at mount."""
        m = harness.Mount(hot_size="32M", opts=self.opts + ["extents=on", "seal_delay=0"], hot_dir=self.hot,
                          tag="ext-kill")
        m.start()
        try:
            self.pressure(m)
            a, b = pattern(4, 9 * MiB), pattern(5, 17 * MiB + 5)
            write(m.path("a"), a, fsync=True)
            write(m.path("b"), b)
            c = pattern(6, 6 * MiB)
            fc = os.open(m.path("c"), os.O_WRONLY | os.O_CREAT, 0o644)
            self.assertEqual(os.pwrite(fc, c, 0), len(c))
            self.assert_extent(m.path("c"))
            m.abort()  # kill -9 with c open for writing
            try:
                os.close(fc)
            except OSError:
                pass  # the connection is gone
        finally:
            m.stop()
        shutil.rmtree(self.hot)
        m2 = self.start(tag="ext-kill2")
        self.assertEqual(read(m2.path("a")), a)
        self.assertEqual(read(m2.path("b")), b)
        self.assertEqual(read(m2.path("c")), c)
        self.assertEqual(file_state(m2.path("c"))["sealed"], 1)
        self.assertEqual(stats_of(m2.mnt)["lost_files"], 0)
        # and the reseal was checkpointed: a clean remount finds the same
        m2.stop()
        m3 = self.start(tag="ext-kill3")
        self.assertEqual(hashlib.sha256(read(m3.path("c"))).digest(),
                         hashlib.sha256(c).digest())
        self.assertEqual(file_state(m3.path("c"))["sealed"], 1)

    def test_flipped_byte_is_eio_through_the_daemon(self):
        m = self.start()
        self.pressure(m)
        data = pattern(7, 3 * MiB)
        write(m.path("f"), data)
        self.wait_sealed(m, m.path("f"))
        ino = os.stat(m.path("f")).st_ino
        m.stop()
        names = extent_files(self.cold, ino)
        self.assertEqual(len(names), 1)
        p = os.path.join(self.cold, "extents", names[0])
        with open(p, "r+b") as f:
            f.seek(2 * MiB + 100)
            f.write(bytes([data[2 * MiB + 100] ^ 0xFF]))
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        # spillway-fsck --verify-data names the file and the bad block
        state = [o for o in self.opts if o.startswith("state_dir=")][0].split("=", 1)[1]
        r = subprocess.run([os.path.join(harness.BUILD_DIR, "spillway-fsck"), "--verify-data",
                            state], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("/f: its extent", r.stdout + r.stderr)
        self.assertIn("1 blocks of 64 KiB fail their crc", r.stdout + r.stderr)
        self.assertIn("2 files in extents", r.stdout)  # f and the fill
        m2 = self.start(extra=["passthrough=off"], tag="ext-flip")
        fd = os.open(m2.path("f"), os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, MiB, 0), data[:MiB])  # a good block
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4096, 2 * MiB + 64)
            self.assertEqual(cm.exception.errno, errno.EIO)
        finally:
            os.close(fd)
        self.assertGreater(ext(m2.mnt)["crc_errors"], 0)

    def test_orphan_extents_are_removed_at_mount(self):
        m = self.start()
        self.pressure(m)
        write(m.path("keep"), pattern(8, 2 * MiB))
        self.wait_sealed(m, m.path("keep"))
        m.stop()
        stray = os.path.join(self.cold, "extents", "%016x-%016x" % (999999, 1))
        with open(stray, "wb") as f:
            f.write(b"x" * 100)
        m2 = self.start(tag="ext-orphan")
        self.assertFalse(os.path.exists(stray))
        self.assertEqual(ext(m2.mnt)["orphans"], 1)
        self.assertEqual(read(m2.path("keep")), pattern(8, 2 * MiB))


    def test_missing_extent_is_a_lost_file(self):
        """An extent gone from its directory (a wiped disk, a hand): its
        file is lost, said by path, counted; nothing else is touched."""
        m = self.start()
        self.pressure(m)
        write(m.path("gone"), pattern(12, 3 * MiB))
        self.wait_sealed(m, m.path("gone"))
        ino = os.stat(m.path("gone")).st_ino
        m.stop()
        for n in extent_files(self.cold, ino):
            os.unlink(os.path.join(self.cold, "extents", n))
        m2 = self.start(tag="ext-missing")
        self.assertFalse(os.path.exists(m2.path("gone")))
        st = stats_of(m2.mnt)
        self.assertEqual(st["lost_files"], 1, st)
        self.assertIn("missing from every cold directory", m2.log_text(50))
        self.assertEqual(st["extents"]["files"], 1, st["extents"])  # the fill only
        self.assertEqual(read(m2.path("fill")), pattern(99, 48 * MiB))


class TestSealDelay(ExtentCase):
    """seal_delay (default 30s): an extent is synced and crc'd that long
    after its last writer's close, on the maintenance worker, as a plain
    directory's pages are written back after they expire: a file deleted
    first is never synced nor read again for its crcs; an unmount seals
    what is still due, before its last checkpoint."""

    def test_seal_comes_later_and_not_for_a_deleted_file(self):
        m = self.start(extra=["seal_delay=2s"])
        self.pressure(m)  # its extent is sealed 2 s after its close
        harness.wait_until(lambda: ext(m.mnt)["seals"] >= 1, 20, "the fill's seal")
        e0 = ext(m.mnt)
        a = pattern(21, 9 * MiB)
        write(m.path("a"), a)
        st = file_state(m.path("a"))
        self.assertEqual((st.get("extent"), st.get("sealed")), (1, 0), st)
        e1 = ext(m.mnt)
        self.assertEqual(e1["written_bytes"] - e0["written_bytes"], len(a), e1)
        self.assertEqual(e1["seals"], e0["seals"], e1)
        # b is deleted before its seal falls due, c after it: only a and c
        write(m.path("b"), pattern(22, 5 * MiB))
        self.assertEqual(file_state(m.path("b")).get("extent"), 1)
        os.unlink(m.path("b"))
        write(m.path("c"), pattern(23, 3 * MiB))
        harness.wait_until(lambda: file_state(m.path("c")).get("sealed") == 1, 20,
                           "c sealed seal_delay after its close")
        self.assertEqual(file_state(m.path("a"))["sealed"], 1)
        e2 = ext(m.mnt)
        self.assertEqual(e2["seals"] - e0["seals"], 2, e2)
        self.assertEqual(read(m.path("a")), a)

    def test_unmount_seals_what_is_due(self):
        m = self.start(extra=["seal_delay=1h"], tag="ext-due")
        self.pressure(m, sealed=False)
        d = pattern(24, 7 * MiB + 3)
        write(m.path("d"), d)
        self.assertEqual(file_state(m.path("d")).get("sealed"), 0)
        m.stop()
        m2 = self.start(extra=["seal_delay=1h"], tag="ext-due2")
        # sealed by the unmount: the mount had nothing to seal again
        self.assertEqual(file_state(m2.path("d")).get("sealed"), 1)
        self.assertEqual(ext(m2.mnt)["seals"], 0, ext(m2.mnt))
        self.assertEqual(read(m2.path("d")), d)


class TestFsx(ExtentCase):

    def test_fsx_on_extents(self):
        """spw_fsx's files created right after a stream was written around
        are extents: every op (pwrite, truncate, punch, fallocate, mmap) goes
        to the kernel or the daemon's extent path and is checked against
        fsx's model."""
        fsx = find_fsx()
        self.assertIsNotNone(fsx)
        good = self.tmpdir()
        m = self.start()
        self.pressure(m)
        created = ext(m.mnt)["created"]
        runs = [FsxRun(self, fsx, m.mnt, seed, 3000, "4M", seed == 12, good)
                for seed in (11, 12)]
        for run in runs:
            run.finish(240)
        self.assertGreater(ext(m.mnt)["created"], created,
                           "fsx's files got no extent: %s" % ext(m.mnt))


class TestFsxPassthrough(ExtentCase):

    def test_fsx_passthrough_second_opener_evict_warm(self):
        """spw_fsx with the passthrough model (-P: a reopen joins a held
        read-only open), streams and scans (-A: big streams move into
        extents while open as RAM fills), evicts and warms (-E: one in three
        of a closed file, a big one all in RAM moving into an extent) and,
        in one run, a second read-only descriptor per file held from start to
        end and read through (-R), on a 32 MiB hot tier right after a
        stream was written around (its files get extents at their open):
        every byte checked against fsx's model, through both descriptors."""
        self.fsx_runs(pressure=True)

    def test_fsx_files_become_extents_while_open(self):
        """The same runs on a fresh mount: fsx's files start in RAM, and
        become extents while open (a stream moves as RAM fills) or closed
        (an evict of a big file all in RAM), later opens passed through."""
        self.fsx_runs(pressure=False)

    def fsx_runs(self, pressure):
        fsx = find_fsx()
        self.assertIsNotNone(fsx)
        good = self.tmpdir()
        m = self.start()
        if pressure:
            self.pressure(m)
        e0 = ext(m.mnt)
        base = 31 if pressure else 41
        runs = [FsxRun(self, fsx, m.mnt, base, 1200, "24M", False, good,
                       extra=["-P", "-A", "-E", "-R"]),
                FsxRun(self, fsx, m.mnt, base + 1, 1200, "20M", False, good,
                       extra=["-P", "-A", "-E"])]
        for run in runs:
            run.finish(120)
        e, st = ext(m.mnt), stats_of(m.mnt)
        # fsx's files were extents (granted at open, moved while written,
        # or evicted into one), opened through the kernel, sealed
        self.assertGreater(e["created"], e0["created"] + 2, e)
        self.assertGreater(e["opens"], e0["opens"], e)
        self.assertGreater(e["seals"], e0["seals"], e)
        self.assertEqual(e["crc_errors"], 0, e)
        self.assertEqual(st["errors"], {"io": 0, "crc": 0}, st["errors"])
        # their extents went with them (fsx unlinks its files)
        harness.wait_until(lambda: ext(m.mnt)["files"] == e0["files"], 10,
                           "fsx's extents removed: %s" % ext(m.mnt))
        self.assertEqual(len(extent_files(self.cold)), e0["files"])


if __name__ == "__main__":
    harness.main()
