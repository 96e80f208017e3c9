#!/usr/bin/env python3
"""
test_durability_s3 - S3 as the only cold tier, with a state_dir: the state
(checkpoint, journal, lease) goes to the bucket next to the segments, so a
replacement node with an empty state_dir and an empty hot_dir gets every
fsync'd file back. Against the real s3rver (SigV4 checked).

1. While mounted: state/checkpoint.*, state/journal.* and state/lease exist
   under <prefix>/<uuid>/; an fsync copies the journal (its records are there).
2. Node dies (kill -9), a new node (fresh hot_dir and state_dir) mounts the
   prefix: refused while the lease is there (one line naming takeover, nothing
   mounted); with -o takeover every fsync'd file is back byte for byte, files
   never fsync'd are either intact or gone - never wrong bytes or zeros.
3. Clean unmount releases the lease: the next node mounts without takeover.
4. Options: s3 alone without state_dir is refused (one line), state_dir=none
   mounts a volatile filesystem.
"""

import os
import signal
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from lib.data import MiB, content  # noqa: E402
from lib.s3 import BUCKET, OBJ_SUFFIX, S3Case  # noqa: E402


class DurS3Case(S3Case):
    timeout = 240

    def node(self, srv, state, tag, **opts):
        """Mount the prefix as a node whose state_dir is `state`."""
        return self.s3_mount(srv, prefix="dur", hot_size="32M", state_dir=state, tag=tag,
                             min_spill_size="4M", **opts)

    def state_keys(self):
        objs = self.server.objects("dur/%s/state" % self.uuid)
        return {k.rsplit("/", 1)[-1]: v for k, v in objs.items()}

    def write(self, path, tag, size, fsync):
        data = content(tag, 0, size)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if fsync:
            dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return data

    def kill_node(self, m):
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
        m.killed_by_watchdog = True  # the harness expects this death
        harness.force_unmount(m.mnt)
        self.assertFalse(harness.is_mounted(m.mnt))


class TestS3State(DurS3Case):
    def test_state_objects_and_replacement_node(self):
        srv = self.s3server()
        st1 = os.path.join(self.tmpdir(), "state1")
        m1 = self.node(srv, st1, "node1")
        keys = self.state_keys()
        self.assertTrue(any(k.startswith("checkpoint.") for k in keys), keys)
        self.assertIn("lease", keys)
        durable, volatile = {}, {}
        os.mkdir(m1.path("d"))
        for i in range(6):
            p = m1.path("d", "f%d" % i)
            durable["d/f%d" % i] = self.write(p, 100 + i, (i + 1) * 3 * MiB + i, True)
        for i in range(3):
            p = m1.path("v%d" % i)
            volatile["v%d" % i] = self.write(p, 200 + i, 2 * MiB + i, False)
        # never fsync'd but spilled (as a stream written around RAM is): a
        # segment in the bucket holding an inode the bucket's copy of the
        # journal never heard of; the replacement drops it, it does not
        # refuse the state as older than the cold tier
        volatile["spilled"] = self.write(m1.path("spilled"), 300, 4 * MiB + 1, False)
        os.setxattr(m1.path("spilled"), "user.spillway.evict", b"1")
        # the fsyncs spilled (S3 alone: segments in the bucket) and copied the journal
        st = self.stats()
        self.assertGreater(st["segments"]["count"], 0, st)
        self.assertGreaterEqual(st["spilled"]["bytes"], sum(map(len, durable.values())), st)
        keys = self.state_keys()
        self.assertTrue(any(k.startswith("journal.") for k in keys), keys)
        uuid = self.uuid

        self.kill_node(m1)
        # a replacement node: empty hot_dir, empty state_dir; the lease holds
        st2 = os.path.join(self.tmpdir(), "state2")
        msg = self.refused_mount(srv, st2)
        self.assertRegex(msg, "takeover")
        self.assertIn("option 's3'", msg)
        m2 = self.node(srv, st2, "node2", takeover=None)
        self.assertEqual(self.uuid, uuid, "the replacement adopted another filesystem")
        for rel, data in durable.items():
            with open(m2.path(rel), "rb") as f:
                self.assertTrue(f.read() == data, "fsync'd %s differs after the takeover" % rel)
        for rel, data in volatile.items():
            p = m2.path(rel)
            if os.path.exists(p):  # never fsync'd: back whole, or gone
                with open(p, "rb") as f:
                    self.assertEqual(f.read(), data, rel)
        # the new node holds the lease now
        with open(os.path.join(st2, "node_id")) as f:
            nid = f.read().strip()
        lease = self.server.objects("dur/%s/state" % uuid)
        self.assertTrue(any(k.endswith("/lease") for k in lease), lease)
        with open(os.path.join(srv.dir, BUCKET, "dur", uuid, "state", "lease" + OBJ_SUFFIX)) as f:
            self.assertIn("node=" + nid, f.read())

    def test_clean_unmount_releases_lease(self):
        srv = self.s3server()
        st1 = os.path.join(self.tmpdir(), "state1")
        m1 = self.node(srv, st1, "node1")
        data = self.write(m1.path("kept"), 300, 9 * MiB + 7, True)
        uuid = self.uuid
        m1.stop()
        self.assertNotIn("lease", self.state_keys())
        st2 = os.path.join(self.tmpdir(), "state2")
        m2 = self.node(srv, st2, "node2")  # no takeover needed
        self.assertEqual(self.uuid, uuid)
        with open(m2.path("kept"), "rb") as f:
            self.assertEqual(f.read(), data)

    def test_stale_adoption_marker_on_an_empty_prefix(self):
        """state_dir/adopting with nothing in the bucket to adopt: the mount
        starts a new filesystem and the marker goes, so the next mount keeps
        what this one wrote (a marker left behind would clear it)."""
        srv = self.s3server()
        st = os.path.join(self.tmpdir(), "state")
        os.mkdir(st, 0o700)
        with open(os.path.join(st, "adopting"), "w") as f:
            f.write("0" * 32)
        m = self.node(srv, st, "fresh")
        self.assertFalse(os.path.exists(os.path.join(st, "adopting")))
        data = self.write(m.path("kept"), 400, 3 * MiB + 1, True)
        m.stop()
        m = self.node(srv, st, "again")
        with open(m.path("kept"), "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(self.stats()["recovery"]["adopted"], 0)

    def refused_mount(self, srv, state):
        o = self.base(srv, s3="s3://%s/dur" % BUCKET, state_dir=state)
        return self.refused(o, env=self.env(srv.access_key, srv.secret_key))


class TestS3StateOptions(DurS3Case):
    def test_s3_alone_needs_state_dir(self):
        srv = self.s3server()
        o = "s3=s3://%s/p,s3_endpoint=%s,s3_path_style" % (BUCKET, srv.endpoint)
        msg = self.refused(o, env=self.env(srv.access_key, srv.secret_key))
        lines = [ln for ln in msg.splitlines() if "state_dir" in ln]
        self.assertEqual(len(lines), 1, msg)
        self.assertIn("option 's3'", lines[0])


if __name__ == "__main__":
    harness.main()
