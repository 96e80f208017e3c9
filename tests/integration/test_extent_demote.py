#!/usr/bin/env python3
"""test_extent_demote - extents (tier/extent, DESIGN section 16) demoted to
S3 as their cold directory passes nvme_threshold.

A sealed, closed extent goes with the segments, least recently opened first:
it is read back, checked against its crcs, written to S3 as one segment of
the file's chunks (tier/spill/demote_ext.c), and the file leaves extent form
(its chunks cold in S3, read back ranged like any segment's). An open extent
stays; one whose bytes fail their crcs stays (never wrong bytes in S3); the
state survives kill -9 and spillway-fsck --verify-data checks the S3 copy.

The cold directory is a tmpfs mounted by the test (lib.tier.Tmpfs); its fill
is raised by a file of the test beside the cold directory. The S3 server is
tests/s3/s3rver.js (lib.s3), with a state_dir (journal) for the remounts.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import MiB, content  # noqa: E402
from lib.s3 import BUCKET, S3Case  # noqa: E402
from lib.tier import Tmpfs, extents_in, file_state  # noqa: E402

SIZE = 120 * MiB + 12345  # a file of three extents' worth of demotion step


def write_file(path, tag, size):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for off in range(0, size, 4 * MiB):
            n = min(4 * MiB, size - off)
            if os.pwrite(fd, content(tag, off, n), off) != n:
                raise AssertionError("short write to %s" % path)
    finally:
        os.close(fd)


class DemoteCase(S3Case):
    timeout = 300

    def setup_mount(self, tag="mnt", endpoint=None, **opts):
        srv = getattr(self, "srv", None) or self.s3server()
        self.srv = srv
        if not getattr(self, "t", None):
            self.t = Tmpfs("2G")
            self.addCleanup(self.t.stop)
            self.colddir = os.path.join(self.t.mnt, "cold")
            os.mkdir(self.colddir)
            self.state = os.path.join(self.tmpdir(), "state")
        self.s3_mount(srv, endpoint=endpoint, nvme=self.colddir, hot_size="160M",
                      min_spill_size="8M", extents="on", nvme_threshold="0.5", mem_pressure="off",
                      seal_delay="1s",
                      state_dir=self.state, tag=tag, **opts)

    def ext(self):
        return self.stats()["extents"]

    def make_extent(self, name, tag):
        """A file written and evicted: an extent (moved whole at the evict, or
        adopted mid-write as RAM filled), sealed."""
        write_file(self.p(name), tag, SIZE)
        self.evict(self.p(name))
        # a stream adopted mid-write is sealed seal_delay (1s) after its close
        harness.wait_until(lambda: file_state(self.p(name)).get("sealed") == 1, 20,
                           "%s sealed" % name)
        st = file_state(self.p(name))
        self.assertEqual((st.get("extent"), st.get("sealed")), (1, 1), "%s: %s" % (name, st))
        return os.stat(self.p(name)).st_ino

    def touch_open(self, name):
        """An open and a read: the extent's last use is now."""
        with open(self.p(name), "rb") as f:
            f.read(4096)

    def fill_over(self, frac):
        """A file of the test beside the cold directory brings its
        filesystem to `frac` full."""
        sv = os.statvfs(self.t.mnt)
        total, free = sv.f_blocks * sv.f_frsize, sv.f_bavail * sv.f_frsize
        want = int(total * frac) - (total - free)
        self.assertGreater(want, 0)
        with open(os.path.join(self.t.mnt, "filler"), "ab") as f:
            f.write(bytes(want))
        return total

    def fill_frac(self):
        sv = os.statvfs(self.t.mnt)
        return 1 - sv.f_bavail / sv.f_blocks

    def mine(self, ino):
        return [n for n in extents_in(self.colddir) if int(n.split("-")[0], 16) == ino]


class TestExtentDemotion(DemoteCase):

    def test_least_recently_used_closed_extent_goes_to_s3(self):
        self.setup_mount()
        inos = {n: self.make_extent(n, tag) for n, tag in (("a", 1), ("b", 2), ("c", 3))}
        self.assertEqual(len(extents_in(self.colddir)), 3)
        # a is the oldest but held open; b next; c used last
        self.touch_open("b")
        self.touch_open("c")
        held = os.open(self.p("a"), os.O_RDONLY)
        try:
            # 10 MiB over 0.5 of 2 GiB: the excess down to 0.45 (112 MiB) is
            # one extent
            self.fill_over(0.5 + 10 * MiB / (2 << 30))
            harness.wait_until(lambda: self.ext()["demoted"] >= 1, 60,
                               "an extent demoted: %s" % json.dumps(self.ext()))
            self.assertEqual(os.pread(held, 4096, SIZE - 4096),
                             content(1, SIZE - 4096, 4096))
        finally:
            os.close(held)
        harness.wait_until(lambda: self.fill_frac() < 0.5, 30,
                           "the cold directory back under nvme_threshold")
        e = self.ext()
        self.assertEqual((e["demoted"], e["demoted_bytes"]), (1, SIZE), e)
        st = {n: file_state(self.p(n)) for n in "abc"}
        self.assertNotIn("extent", st["b"], st)
        self.assertEqual(st["b"]["cold"], (SIZE + MiB - 1) // MiB, st)
        self.assertEqual(st["a"].get("extent"), 1, st)  # open: it stays
        self.assertEqual(st["c"].get("extent"), 1, st)  # used last: it stays
        self.assertEqual(self.mine(inos["b"]), [])
        self.assertEqual(len(self.mine(inos["a"])), 1)
        # b's bytes are one segment in the bucket, none on the disk
        s = self.stats()
        objs = self.seg_objects()
        self.assertEqual(len(objs), 1, objs)
        self.assertGreaterEqual(sum(objs.values()), SIZE)
        self.assertEqual(s["tiers"]["s3"], sum(objs.values()), json.dumps(s["tiers"]))
        # read back ranged from S3: a random range first, then all of it
        fd = os.open(self.p("b"), os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, 10000, 77 * MiB + 3), content(2, 77 * MiB + 3, 10000))
        finally:
            os.close(fd)
        for n, tag in (("a", 1), ("b", 2), ("c", 3)):
            self.assertContent(self.p(n), tag, SIZE)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

        # kill -9, remount on the same state: b is in S3 by the journal
        os.remove(os.path.join(self.t.mnt, "filler"))
        self.m.abort()
        self.m.proc.wait()
        self.m.stop()
        self.setup_mount(tag="again")
        for n, tag in (("a", 1), ("b", 2), ("c", 3)):
            self.assertContent(self.p(n), tag, SIZE)
        self.assertNotIn("extent", file_state(self.p("b")))
        self.assertEqual(file_state(self.p("c")).get("extent"), 1, file_state(self.p("c")))
        self.assertEqual(self.stats()["lost_files"], 0)
        self.m.stop()
        # spillway-fsck reads b's chunks back from S3 and checks their crcs
        r = subprocess.run([os.path.join(harness.BUILD_DIR, "spillway-fsck"), "--verify-data",
                            self.state], capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 files in extents", r.stdout)

    def test_damaged_extent_stays_on_disk(self):
        self.setup_mount()
        ino = self.make_extent("d", 4)
        self.m.stop()
        names = self.mine(ino)
        self.assertEqual(len(names), 1)
        with open(os.path.join(self.colddir, "extents", names[0]), "r+b") as f:
            f.seek(50 * MiB + 7)
            b = f.read(1)
            f.seek(50 * MiB + 7)
            f.write(bytes([b[0] ^ 0x5A]))
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        self.setup_mount(tag="damaged")
        self.fill_over(0.5 + 40 * MiB / (2 << 30))
        harness.wait_until(lambda: "fails its crcs: it stays on disk" in self.full_log(self.m),
                           60, "the demotion met the damaged block")
        e = self.ext()
        self.assertEqual(e["demoted"], 0, e)
        self.assertGreaterEqual(e["crc_errors"], 1, e)
        self.assertEqual(file_state(self.p("d")).get("extent"), 1)
        self.assertEqual(self.mine(ino), names)
        self.assertEqual(self.seg_objects(), {})  # nothing of it reached S3
        # the block is EIO through the daemon, never other bytes
        self.m.stop()
        self.setup_mount(tag="damaged2", passthrough="off")
        self.assertReadEIO(self.p("d"), 4096, 50 * MiB)



class TestReplacementNode(DemoteCase):
    """s3_state: with nvme and s3 the bucket keeps a copy of the state too
    (pushed after each demotion batch). The node dies with its disk; a
    replacement with an empty state_dir adopts the prefix, with S3 alone or
    with a disk of its own: the demoted extent is back byte for byte, files
    whose bytes were on the old disk or in its RAM are lost (never zeros),
    and the adopted state is the new node's own from then on."""

    def write(self, name, tag, size, fsync):
        fd = os.open(self.p(name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            self.assertEqual(os.write(fd, content(tag, 0, size)), size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def node(self, tag, **opts):
        """A node with a fresh hot_dir on the same prefix."""
        return self.s3_mount(self.srv, hot_size="160M", min_spill_size="8M", tag=tag, **opts)

    def survivors(self):
        self.assertContent(self.p("b"), 2, SIZE)
        for gone in ("local", "ram", "d/x", "seg"):
            self.assertFalse(os.path.exists(self.p(gone)), gone)
        self.assertTrue(os.path.isdir(self.p("d")))

    def test_replacement_node_sees_demoted_extent(self):
        self.setup_mount(s3_state=None)
        # written before RAM fills: a segment on the disk
        self.write("seg", 11, 2 * MiB + 3, False)
        self.evict(self.p("seg"))
        harness.wait_until(lambda: self.stats()["segments"]["count"] == 1, 30,
                           "seg spilled: %s" % file_state(self.p("seg")))
        self.make_extent("b", 2)
        os.mkdir(self.p("d"))
        self.write("local", 8, 3 * MiB + 5, True)  # fsync'd: on the disk
        self.write("d/x", 9, 5000, True)
        self.write("ram", 10, MiB, False)  # only in RAM
        with open(self.p("seg"), "rb") as f:  # read after b's seal: b is older
            self.assertEqual(f.read(), content(11, 0, 2 * MiB + 3))
        uuid = self.uuid
        copies = self.stats()["journal"]["bucket_copies"]
        self.assertGreaterEqual(copies, 1)  # the mount's own
        # fsyncs of files on the disk put nothing in S3: no copy for them
        self.fill_over(0.5 + 10 * MiB / (2 << 30))
        harness.wait_until(lambda: self.ext()["demoted"] >= 1, 60,
                           "b demoted: %s" % json.dumps(self.ext()))
        harness.wait_until(lambda: self.stats()["journal"]["bucket_copies"] > copies, 30,
                           "the state copied to the bucket after the demotion")
        self.assertEqual(self.stats()["segments"]["demoted"], 0)  # local stays on disk
        # the node dies, its disk with it
        self.m.abort()
        self.m.proc.wait()
        self.m.stop()

        # a replacement with S3 alone: refused while the lease holds
        st1, st2 = self.state, os.path.join(self.tmpdir(), "state2")
        msg = self.refused(self.base(self.srv, s3="s3://%s/pfx" % BUCKET, state_dir=st2))
        self.assertIn("takeover", self.one_line(msg, "s3"))
        self.state = st2
        self.node("node2", state_dir=st2, takeover=None)
        self.assertEqual(self.uuid, uuid, "the replacement adopted another filesystem")
        rec = self.stats()["recovery"]
        self.assertEqual((rec["adopted"], rec["adopt_gone_segments"] >= 1), (1, True), rec)
        self.assertEqual(self.stats()["lost_files"], 4)
        self.survivors()
        log = self.full_log(self.m)
        self.assertIn("recovery: lost /local", log)
        self.assertIn("adopted from the bucket", log)
        # its state is its own: a remount of it adopts nothing, loses nothing
        self.m.stop()
        self.node("node2b", state_dir=st2)
        self.assertEqual((self.stats()["recovery"]["adopted"], self.stats()["lost_files"]), (0, 0))
        self.survivors()
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})
        self.m.stop()
        r = subprocess.run([os.path.join(harness.BUILD_DIR, "spillway-fsck"), "--verify-data",
                            st2], capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

        # a replacement with a disk of its own adopts that (S3-alone) state:
        # its segment is S3's there too
        cold3 = os.path.join(self.t.mnt, "cold3")
        os.mkdir(cold3)
        st3 = os.path.join(self.tmpdir(), "state3")
        self.node("node3", nvme=cold3, state_dir=st3, s3_state=None, extents="on")
        self.assertEqual((self.stats()["recovery"]["adopted"], self.stats()["lost_files"]), (1, 0))
        self.survivors()
        self.assertEqual(self.stats()["tiers"]["s3"], sum(self.seg_sizes().values()))
        self.m.stop()

        # an adoption cut short (the marker is still there) starts over from
        # the bucket, whatever the state_dir holds: here the dead node's
        # own journal, whose disk segment no store has
        st4 = os.path.join(self.tmpdir(), "state4")
        os.mkdir(st4, 0o700)
        for n in os.listdir(st1):
            if n.startswith(("checkpoint.", "journal.")):
                with open(os.path.join(st1, n), "rb") as src, open(os.path.join(st4, n), "wb") as d:
                    d.write(src.read())
        with open(os.path.join(st4, "adopting"), "w") as f:
            f.write(uuid)
        self.node("node4", state_dir=st4)
        self.assertEqual(self.stats()["recovery"]["adopted"], 1)
        self.survivors()
        self.assertFalse(os.path.exists(os.path.join(st4, "adopting")))

    def seg_sizes(self):
        objs = self.server.objects("%s/%s" % (self.prefix, self.uuid))
        return {k: v for k, v in objs.items() if "/state/" not in k}


class TestExtentDemotionRaces(DemoteCase):
    """A demotion's upload slowed by a proxy that holds back each part's
    reply (1 to 1.5 s), so that a writer and a kill -9 meet it."""

    def slow_mount(self, tag):
        self.srv = self.s3server()
        self.px = self.proxy(self.srv, stall="1.0:1.5")
        self.px.configure(1.0, kinds=["stall"], match="^PUT .*partNumber=")
        self.setup_mount(tag=tag, endpoint=self.px.endpoint)

    def upload_started(self):
        harness.wait_until(
            lambda: any(r["method"] == "PUT" and "partNumber=" in r["target"]
                        for r in self.px.requests()),
            60, "the demotion's upload started")

    def test_writer_during_the_upload_wins(self):
        self.slow_mount("race")
        self.make_extent("w", 5)
        expect = bytearray(content(5, 0, SIZE))
        patch = content(6, 0, MiB)
        self.fill_over(0.5 + 10 * MiB / (2 << 30))
        self.upload_started()
        # the upload reads the extent as it was; this write makes it stale
        fd = os.open(self.p("w"), os.O_WRONLY)
        try:
            self.assertEqual(os.pwrite(fd, patch, 10 * MiB + 5), MiB)
        finally:
            os.close(fd)
        expect[10 * MiB + 5:11 * MiB + 5] = patch
        # the stale upload is dropped; the extent, sealed again, goes next
        self.px.configure(0)
        harness.wait_until(lambda: self.ext()["demoted"] >= 1, 90,
                           "the rewritten extent demoted: %s" % json.dumps(self.ext()))
        self.assertNotIn("extent", file_state(self.p("w")))
        self.assertIn("changed during its copy: the copy is dropped", self.full_log(self.m))
        with open(self.p("w"), "rb") as f:
            self.assertTrue(f.read() == bytes(expect), "w differs after the race")
        self.assertEqual(self.ext()["demoted"], 1)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})

    def test_kill_during_the_upload(self):
        self.slow_mount("kill")
        ino = self.make_extent("k", 7)
        self.fill_over(0.5 + 10 * MiB / (2 << 30))
        self.upload_started()
        self.m.abort()
        self.m.proc.wait()
        self.m.stop()
        # nothing journaled: the file is its extent; the demotion starts again
        self.px.configure(0)
        self.setup_mount(tag="after", endpoint=self.px.endpoint)
        self.assertEqual(self.stats()["lost_files"], 0)
        self.assertContent(self.p("k"), 7, SIZE)
        harness.wait_until(lambda: self.ext()["demoted"] >= 1, 90,
                           "demoted after the restart: %s" % json.dumps(self.ext()))
        self.assertEqual(self.mine(ino), [])
        self.assertContent(self.p("k"), 7, SIZE)
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


if __name__ == "__main__":
    harness.main()
