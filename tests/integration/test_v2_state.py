#!/usr/bin/env python3
"""test_v2_state - v2 segments mounted by the v3 build.

tests/unit/fixtures/v2-state.tar.gz is a whole filesystem made by the
format-v2 code (main at 9f21a4f; tests/unit/fixtures/mk_v2_state.py says
how): a cold directory of v2 segments and its state_dir, with small files,
multi-chunk files, a sparse file, a file written over its cold copy
(overlay records), a hard link, a symlink, an empty file, nested
directories. Today's build mounts it and every path is what the manifest
says (sha256 of every file, read from the v2 records); then new data goes
into v3 segments beside the v2 ones (a new file, another overlay over a v2
record), spillway-fsck --verify-data finds the mixed state clean, and a
remount reads it all again.
"""

import hashlib
import json
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import MiB, sha_file  # noqa: E402
from lib.tier import seg_footer  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "fixtures",
                       "v2-state.tar.gz")


def sha_bytes(data):
    return hashlib.sha256(data).hexdigest()


class TestV2State(harness.SpwTestCase):
    timeout = 300

    def setUp(self):
        super().setUp()
        top = self.tmpdir()
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}  # ours: trusted
        with tarfile.open(FIXTURE) as t:
            t.extractall(top, **kw)
        with open(os.path.join(top, "MANIFEST.json")) as f:
            self.want = json.load(f)
        self.cold = os.path.join(top, "cold")
        self.state_dir = os.path.join(self.cold, ".spillway")

    def versions(self):
        """{segment file: format version} of the cold directory."""
        return {n: seg_footer(os.path.join(self.cold, n))[0]
                for n in os.listdir(self.cold) if n.startswith("seg-")}

    def mount_it(self):
        return self.mount(hot_size="32M", opts=["nvme=" + self.cold, "chunk_size=1M"])

    def check_tree(self, mnt, extra=None):
        paths = dict(self.want["paths"])
        paths.update(extra or {})
        seen = set()
        for root, dirs, files in os.walk(mnt):
            for n in dirs + files:
                seen.add(os.path.relpath(os.path.join(root, n), mnt))
        self.assertEqual(seen, set(paths))
        for rel, e in sorted(paths.items()):
            p = os.path.join(mnt, rel)
            if e["kind"] == "symlink":
                self.assertEqual(os.readlink(p), e["target"], rel)
            elif e["kind"] == "dir":
                self.assertTrue(os.path.isdir(p) and not os.path.islink(p), rel)
            else:
                self.assertEqual(sha_file(p), (e["sha256"], e["size"]), rel)
        for group in self.want["hard_links"]:
            inos = {os.lstat(os.path.join(mnt, rel)).st_ino for rel in group}
            self.assertEqual(len(inos), 1, group)
            self.assertEqual(os.lstat(os.path.join(mnt, group[0])).st_nlink, len(group))

    def test_v2_state_mounted_by_v3(self):
        before = self.versions()
        self.assertTrue(before)
        self.assertEqual(set(before.values()), {2})
        m = self.mount_it()
        self.check_tree(m.mnt)
        st = json.loads(os.getxattr(m.mnt, "user.spillway.stats"))
        self.assertEqual(st["errors"], {"io": 0, "crc": 0})
        # new bytes beside the v2 ones: a new file, another overlay on "ovl"
        new = bytes((i * 7 + 3) & 0xff for i in range(3 * MiB + 5))
        with open(m.path("new"), "wb") as f:
            f.write(new)
        os.setxattr(m.path("new"), "user.spillway.evict", b"1")
        with open(m.path("ovl"), "rb") as f:
            ovl = bytearray(f.read())
        patch = b"v3" * 2048
        fd = os.open(m.path("ovl"), os.O_WRONLY)
        os.pwrite(fd, patch, MiB + 65536)
        os.close(fd)
        ovl[MiB + 65536:MiB + 65536 + len(patch)] = patch
        os.setxattr(m.path("ovl"), "user.spillway.evict", b"1")
        extra = {"new": {"kind": "file", "sha256": sha_bytes(new), "size": len(new)},
                 "ovl": {"kind": "file", "sha256": sha_bytes(bytes(ovl)), "size": len(ovl)}}
        self.check_tree(m.mnt, extra)
        problems = m.stop()
        self.assertEqual(problems, [])
        after = self.versions()
        self.assertEqual({before[n] for n in before if n in after}, {2})
        self.assertIn(3, set(after.values()), after)
        r = subprocess.run([os.path.join(harness.BUILD_DIR, "spillway-fsck"), "--verify-data",
                            self.state_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout.decode())
        self.assertIn("clean", r.stdout.decode())
        self.assertNotIn("off 4 KiB", r.stdout.decode())
        m2 = self.mount_it()
        self.check_tree(m2.mnt, extra)


if __name__ == "__main__":
    harness.main()
