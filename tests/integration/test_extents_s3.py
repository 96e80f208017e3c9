#!/usr/bin/env python3
"""test_extents_s3 - extents (tier/extent, DESIGN section 16) on a cold
directory that fills, with S3 below: an extent is granted only while its
directory keeps room (1 GiB and 10 % free, and with S3 below under
nvme_threshold - 0.05); once it does not, streams under pressure go through
the daemon (segments, demoted to S3 as the directory passes nvme_threshold)
and no writer sees ENOSPC while S3 has room.

The cold directory is a small tmpfs (mounted by the test, lib.tier.Tmpfs);
its room is taken by a file of the test beside the cold directory, never by
the daemon's own files. The S3 server is tests/s3/s3rver.js (lib.s3).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import MiB, content  # noqa: E402
from lib.s3 import S3Case  # noqa: E402
from lib.tier import Tmpfs, file_state  # noqa: E402


def write_stream(path, tag, size, fsync=False):
    """content(tag) in 1 MiB writes in a row (a stream)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for off in range(0, size, MiB):
            n = min(MiB, size - off)
            if os.pwrite(fd, content(tag, off, n), off) != n:
                raise AssertionError("short write to %s" % path)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def statvfs_room(d):
    sv = os.statvfs(d)
    return sv.f_blocks * sv.f_frsize, sv.f_bavail * sv.f_frsize


class TestExtentsFullColdDir(S3Case):
    timeout = 240

    def setup_mount(self, size, **opts):
        srv = self.s3server()
        self.t = Tmpfs(size)
        self.addCleanup(self.t.stop)
        self.colddir = os.path.join(self.t.mnt, "cold")
        os.mkdir(self.colddir)
        self.s3_mount(srv, nvme=self.colddir, hot_size="32M", min_spill_size="8M",
                      extents="on", mem_pressure="off", write_wait="60s", seal_delay="0",
                      **opts)
        return srv

    def ext(self):
        return self.stats()["extents"]

    def fill_to(self, avail):
        """A file of the test beside the cold directory leaves `avail`
        bytes free on its filesystem."""
        total, free = statvfs_room(self.t.mnt)
        self.assertGreater(free, avail)
        with open(os.path.join(self.t.mnt, "filler"), "ab") as f:
            f.write(bytes(free - avail))
        total, free = statvfs_room(self.t.mnt)
        self.assertLessEqual(free, avail + MiB)
        return total, free

    def check_daemon_path(self, files, created):
        """Streams written now: no extent for any (granted at open, or moved
        mid-write), no ENOSPC, every byte right, some demoted to S3."""
        for name, tag, size in files:
            write_stream(self.p(name), tag, size, fsync=(tag % 2 == 0))
            self.assertNotIn("extent", file_state(self.p(name)), name)
        s = self.stats()
        self.assertEqual(s["extents"]["created"], created, s["extents"])
        self.assertEqual(s["enospc"], 0, json.dumps(s))
        self.assertGreater(s["admission"]["written_around_files"], 0, s["admission"])
        harness.wait_until(lambda: self.stats()["segments"]["demoted"] > 0, 60,
                           "segments demoted to S3: %s" % json.dumps(self.stats()["segments"]))
        self.assertGreater(self.stats()["tiers"]["s3"], 0, json.dumps(self.stats()))
        for name, tag, size in files:
            self.evict(self.p(name))
        for name, tag, size in files:
            self.assertContent(self.p(name), tag, size)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_margin_gone_streams_go_through_the_daemon(self):
        """A directory of 1100 MiB: a stream under pressure gets an extent
        while 1 GiB stays free beside it; once the test's file leaves less
        than that, new streams (a file created right after a write-around,
        a big stream as RAM fills) go through the daemon: segments on the
        directory, demoted to S3 as it passes nvme_threshold (0.2), no
        ENOSPC, every byte right."""
        self.setup_mount("1100M", nvme_threshold="0.2")
        # room: a stream under pressure moves into an extent
        write_stream(self.p("first"), 1, 40 * MiB)
        harness.wait_until(lambda: file_state(self.p("first")).get("sealed") == 1, 20,
                           "first sealed")
        self.assertEqual(self.ext()["created"], 1, self.ext())
        self.assertContent(self.p("first"), 1, 40 * MiB)
        # no room: the test's file leaves the directory 900 MiB free (< 1 GiB)
        self.fill_to(900 * MiB)
        files = [("s%d" % i, 10 + i, 30 * MiB + 4097 * i) for i in range(6)]
        self.check_daemon_path(files, created=1)
        self.assertContent(self.p("first"), 1, 40 * MiB)

    def test_s3_threshold_streams_go_through_the_daemon(self):
        """With S3 below, an extent must also leave the directory under
        nvme_threshold - 0.05 (demotion keeps it under nvme_threshold, an
        extent only once it is closed: test_extent_demote): a directory of 2 GiB with 1400 MiB free keeps
        the 1 GiB margin but is above 0.3 - 0.05 full: no extent, the
        streams go through the daemon and on to S3, no ENOSPC."""
        self.setup_mount("2G", nvme_threshold="0.3")
        total, free = self.fill_to(1400 * MiB)
        self.assertGreater(free, 1 << 30)  # the margin alone would grant one
        self.assertGreater(total - free, 0.25 * total)
        files = [("t%d" % i, 20 + i, 30 * MiB + 8191 * i) for i in range(6)]
        self.check_daemon_path(files, created=0)

    def test_tiny_cold_dir_streams_reach_s3(self):
        """A cold directory of 64 MiB (never 1 GiB free: no extent) under
        streams of 160 MiB, as RAM fills and after write-arounds: all of it
        goes through the daemon to segments and on to S3; no writer sees
        ENOSPC (an extent there would: the kernel writes it, nothing
        demotes it), every byte right."""
        self.setup_mount("64M")
        files = [("u%d" % i, 30 + i, 40 * MiB + 12289 * i) for i in range(4)]
        self.check_daemon_path(files, created=0)
        total, free = statvfs_room(self.t.mnt)
        self.assertLess(free, 1 << 30)


if __name__ == "__main__":
    harness.main()
