#!/usr/bin/env python3
"""test_passthrough_holes - a passthrough writer's bytes in a chunk the
daemon holds as a hole past its chunk map (a truncate up made it) are
counted as changed like every other chunk of the file (docs/passthrough.md:
"every chunk of the file counts as dirty"): an evict, or an fsync and a
kill -9 with a wiped hot_dir, keeps them.

Found by spw_fsx -P -A -E (seed 1206, 20M files, extents=off): the refresh
at a passthrough writer's close and fsync (tier_pt_refresh_locked) marked
only the chunks of the map, and a truncate up leaves the chunks past the
old end out of it; the evict then dropped the writer's bytes there (read
back as zeros), and an fsync never spilled them.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402

MiB = 1 << 20
OFF = 16 * MiB + 512 * 1024  # in chunk 4 (chunk_size 4M), past the old end's chunk map


class TestPassthroughHoles(harness.SpwTestCase):
    timeout = 120

    def setUp(self):
        super().setUp()
        base = self.tmpdir()
        self.hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        self.cold = os.path.join(base, "cold")
        os.mkdir(self.cold)
        self.opts = ["nvme=" + self.cold, "state_dir=" + os.path.join(base, "state"),
                     "mem_pressure=off", "chunk_size=4M"]

    def write_into_hole(self, m, fsync=False):
        """1 MiB written, truncated up to 17 MiB, then a passthrough writer
        (joining a read-only open) writes 64 KiB at OFF."""
        p = m.path("f")
        with open(p, "wb") as f:
            f.write(b"a" * MiB)
        os.truncate(p, 17 * MiB)
        pt0 = stats_of(m.mnt)["passthrough"]["opens"]
        holder = os.open(p, os.O_RDONLY)
        w = os.open(p, os.O_WRONLY)
        try:
            self.assertEqual(stats_of(m.mnt)["passthrough"]["opens"], pt0 + 2,
                             "the writer was not passed through")
            self.assertEqual(os.pwrite(w, b"b" * 65536, OFF), 65536)
            if fsync:
                os.fsync(w)
        finally:
            if not fsync:
                os.close(w)
                os.close(holder)
        return p, (w, holder) if fsync else None

    def expect(self, p):
        with open(p, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), 17 * MiB)
        self.assertEqual(data[:MiB], b"a" * MiB)
        self.assertEqual(data[OFF:OFF + 65536], b"b" * 65536, "the writer's bytes")
        self.assertEqual(data[MiB:OFF].count(0), OFF - MiB)
        self.assertEqual(data[OFF + 65536:].count(0), 17 * MiB - OFF - 65536)

    def test_evict_keeps_a_passthrough_write_into_a_hole(self):
        m = self.mount(hot_size="64M", opts=self.opts, hot_dir=self.hot)
        p, _ = self.write_into_hole(m)
        os.setxattr(p, "user.spillway.evict", b"1")
        self.assertEqual(file_state(p)["hot"], 0, file_state(p))
        self.expect(p)

    def test_fsync_of_a_passthrough_write_into_a_hole_survives_kill9(self):
        m = harness.Mount(hot_size="64M", opts=self.opts, hot_dir=self.hot, tag="pthole")
        m.start()
        try:
            p, fds = self.write_into_hole(m, fsync=True)
            m.abort()  # kill -9 with the writer open, its bytes fsync'd
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the connection is gone
        finally:
            m.stop()
        shutil.rmtree(self.hot)
        m2 = self.mount(hot_size="64M", opts=self.opts, hot_dir=self.hot, tag="pthole2")
        self.expect(m2.path("f"))


if __name__ == "__main__":
    harness.main()
