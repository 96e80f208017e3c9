#!/usr/bin/env python3
"""
test_fsck - spillway-fsck against filesystems made by real mounts
(nvme cold tier, hot_size 64M, chunk_size 1M; every file spilled with the
user.spillway.evict xattr before a clean unmount, so the cold tier holds all
the data and a remount on a fresh hot_dir reads it back).

a. A clean filesystem: exit 0, with and without --verify-data.
b. A segment file deleted: reported as "segment N missing: PATH (chunks ..)"
   for exactly the files it held, exit 4; --repair removes them (exit 1,
   "lost: PATH"), then fsck is clean and a remount has the other files.
c. A byte flipped inside a chunk: clean without --verify-data (footers are
   intact), "chunk C of PATH: crc mismatch in segment N" with it (exit 4);
   with a good second copy of the segment under another id, --repair
   relocates the chunk (exit 1), fsck is clean and a remount reads the right
   bytes; without one, --repair removes the file.
d. A segment copied to a new id: "segment N unreferenced (SIZE)", exit 4;
   --repair deletes it (exit 1); then clean.
e. --rebuild: journals deleted and the checkpoint replaced by an older one
   (taken when fewer files existed): a remount has every older file with its
   current data and the newer files as /lost+found/#<ino> with theirs.
f. fsck of a mounted filesystem: exit 8, one line on stderr. Bad arguments:
   exit 16.
h. A dirty chunk past a file's end appended to the journal: reported by path,
   --repair drops it, then clean.

Run: python3 test_fsck.py --build BUILD_DIR [-k pattern]
"""

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.data import MiB, content, sha_file, write_content  # noqa: E402
from lib.tier import file_state, seg_footer  # noqa: E402

SEG_HDR = 4096

# --------------------------------------------------------------------------
# segment files (tier/segment/segment.h)

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def seg_name(seg_id):
    return "seg-%016x.spw" % seg_id


def seg_id_of(name):
    m = re.fullmatch(r"seg-([0-9a-f]{16})\.spw", name)
    return int(m.group(1), 16) if m else None


def seg_entries(path):
    """Footer entries of a segment file (any format version, tier/segment/segment.h):
    [(ino, chunk, gen, len, off, crc)], len being the record's stored bytes."""
    return [(ino, chunk, gen, ln, off, crc)
            for ino, chunk, gen, _flags, off, ln, crc, _clen in seg_footer(path)[2]]


def copy_segment(src, dst, new_id):
    """A copy of segment file src that is a valid segment `new_id` (header
    id and crc rewritten)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    data[32:40] = struct.pack("<Q", new_id)
    data[4092:4096] = struct.pack("<I", crc32c(bytes(data[:4092])))
    with open(dst, "wb") as f:
        f.write(data)


def flip_byte(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))


# --------------------------------------------------------------------------


class FsckCase(SpwTestCase):
    """Filesystems made by real mounts on a cold directory that outlives them."""

    timeout = 120

    def setUp(self):
        super().setUp()
        self.fsck_bin = os.path.join(harness.BUILD_DIR, "spillway-fsck")
        if not os.access(self.fsck_bin, os.X_OK):
            self.fail("%s is missing or not executable" % self.fsck_bin)
        self.cold = tempfile.mkdtemp(prefix="spw-fsck-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, self.cold, True)
        self.state_dir = os.path.join(self.cold, ".spillway")
        self.m = None

    # mounts -------------------------------------------------------------

    def start(self, tag, hot_dir=None):
        m = harness.Mount(hot_size="64M", tag=tag, hot_dir=hot_dir,
                          opts=["chunk_size=1M", "nvme=" + self.cold, "min_spill_size=4M"])
        m.start()
        self.addCleanup(m.stop)
        self.m = m
        return m

    def stop(self):
        problems = self.m.stop()
        self.assertFalse(problems, "spillway: %s\n%s" % ("; ".join(problems),
                                                          self.m.log_text(30)))
        self.m = None

    def state(self, path):
        return file_state(path)

    def spill(self, path):
        """Evict path; wait until all its bytes are in the cold tier only."""
        os.setxattr(path, "user.spillway.evict", b"1")
        harness.wait_until(lambda: (lambda s: s["dirty"] == 0 and s["hot"] == 0 and
                                    s["spilling"] == 0)(self.state(path)),
                           30, "%s spilled: %s" % (path, self.state(path)))

    def write_files(self, files):
        """files: {relpath: (tag, size)} -> {relpath: inode number}."""
        inos = {}
        for rel, (tag, size) in sorted(files.items()):
            p = self.m.path(rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            write_content(p, tag, size)
            self.spill(p)
            inos[rel] = os.stat(p).st_ino
        return inos

    def make_fs(self):
        """A small tree, all spilled, cleanly unmounted. {relpath: ino}."""
        self.files = {"d/a": (1, 3 * MiB + 123), "d/e/b": (2, 2 * MiB + 5),
                      "small": (3, 100), "big": (4, 5 * MiB)}
        self.start("make")
        os.symlink("d/a", self.m.path("link"))
        self.inos = self.write_files(self.files)
        self.stop()
        return self.inos

    def assert_files(self, files, root=""):
        """Each file under the mount has content(tag, 0, size), read uncached."""
        for rel, (tag, size) in sorted(files.items()):
            p = self.m.path(root, rel) if root else self.m.path(rel)
            got, n = sha_file(p)
            exp = hashlib.sha256(content(tag, 0, size)).hexdigest()
            self.assertEqual((n, got), (size, exp), "%s: wrong data after remount" % p)

    # segments -----------------------------------------------------------

    def segments(self):
        """{seg_id: path} of the finished segments in the cold directory."""
        out = {}
        for n in os.listdir(self.cold):
            i = seg_id_of(n)
            if i is not None:
                out[i] = os.path.join(self.cold, n)
        return out

    def paths_in(self, seg_path):
        by_ino = {v: k for k, v in self.inos.items()}
        return sorted({"/" + by_ino[e[0]] for e in seg_entries(seg_path) if e[0] in by_ino})

    def seg_holding(self, rel, chunk=None):
        """(seg_id, entry) holding a chunk of rel (its first one by default)."""
        ino = self.inos[rel]
        for sid, p in sorted(self.segments().items()):
            for e in seg_entries(p):
                if e[0] == ino and (chunk is None or e[1] == chunk):
                    return sid, e
        self.fail("no segment holds %s chunk %s" % (rel, chunk))

    # running fsck -------------------------------------------------------

    def fsck(self, *args, expect=None):
        r = subprocess.run([self.fsck_bin] + list(args) + [self.state_dir],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
        if expect is not None:
            self.assertEqual(r.returncode, expect,
                             "spillway-fsck %s: exit %d, expected %d\n--- stdout ---\n%s"
                             "--- stderr ---\n%s" % (" ".join(args), r.returncode, expect, out,
                                                     err))
        return r.returncode, out, err

    def assertClean(self, *args):
        _, out, _ = self.fsck(*args, expect=0)
        self.assertRegex(out.splitlines()[-1], r": clean$", out)


class TestCheck(FsckCase):

    def test_a_clean(self):
        self.make_fs()
        self.assertClean()
        _, out, _ = self.fsck("--verify-data", expect=0)
        last = out.splitlines()[-1]
        self.assertIn("4 files", last)
        self.assertRegex(last, r"verified: clean$")
        # the summary counts the segments it read (it once counted them
        # after closing its tables: "in 0 segments (0 bytes)")
        segs = self.segments()
        size = sum(os.path.getsize(p) for p in segs.values())
        m = re.search(r" in (\d+) segments? \(", last)
        self.assertTrue(m, last)
        self.assertEqual(int(m.group(1)), len(segs), last)
        self.assertGreater(size, 0)
        self.assertNotIn("(0 bytes)", last)
        # --repair on a clean filesystem changes nothing
        before = sorted(os.listdir(self.state_dir)), sorted(self.segments())
        self.fsck("--repair", expect=0)
        self.assertEqual((sorted(os.listdir(self.state_dir)), sorted(self.segments())), before)

    def test_b_missing_segment(self):
        self.make_fs()
        sid, _ = self.seg_holding("d/e/b")
        victims = self.paths_in(self.segments()[sid])
        os.unlink(self.segments()[sid])
        _, out, _ = self.fsck(expect=4)
        lines = [ln for ln in out.splitlines() if " missing: " in ln]
        named = sorted(re.fullmatch(r"segment %d missing: (\S+) \(chunks? [0-9,-]+\)" % sid,
                                    ln).group(1) for ln in lines)
        self.assertEqual(named, victims, out)
        self.assertRegex(out.splitlines()[-1], r" %d left$" % len(victims))

        # --repair: the damaged files are removed and listed as lost
        _, out, _ = self.fsck("--repair", expect=1)
        self.assertEqual(sorted(re.findall(r"^lost: (\S+)$", out, re.M)), victims, out)
        self.assertClean()
        self.start("after-repair")
        for v in victims:
            self.assertFalse(os.path.lexists(self.m.path(v.lstrip("/"))), v)
        self.assert_files({k: v for k, v in self.files.items() if "/" + k not in victims})
        self.stop()

    def test_c_flipped_byte(self):
        self.make_fs()
        sid, e = self.seg_holding("d/a", chunk=1)
        seg = self.segments()[sid]
        spare = max(self.segments()) + 10
        copy_segment(seg, os.path.join(self.cold, seg_name(spare)), spare)
        flip_byte(seg, e[4] + 1000)
        # footers are intact: only reading the data finds it
        _, out, _ = self.fsck(expect=4)
        self.assertNotIn("crc", out)
        self.assertIn("segment %d unreferenced" % spare, out)
        _, out, _ = self.fsck("--verify-data", expect=4)
        self.assertIn("chunk 1 of /d/a: crc mismatch in segment %d" % sid, out.splitlines(), out)

        # --repair finds the good copy in the spare segment and points at it
        _, out, _ = self.fsck("--verify-data", "--repair", expect=1)
        self.assertNotIn("lost:", out)
        self.assertNotIn("segment %d unreferenced" % spare, out)
        self.assertClean("--verify-data")
        self.assertIn(spare, self.segments())
        self.start("after-relocate")
        self.assert_files(self.files)
        self.stop()

    def test_c_flipped_byte_no_copy(self):
        self.make_fs()
        sid, e = self.seg_holding("big", chunk=3)
        flip_byte(self.segments()[sid], e[4] + e[3] - 1)
        self.assertClean()
        _, out, _ = self.fsck("--verify-data", expect=4)
        self.assertIn("chunk 3 of /big: crc mismatch in segment %d" % sid, out.splitlines(), out)
        _, out, _ = self.fsck("--verify-data", "--repair", expect=1)
        self.assertEqual(re.findall(r"^lost: (\S+)$", out, re.M), ["/big"], out)
        self.assertClean("--verify-data")
        self.start("after-repair")
        self.assertFalse(os.path.exists(self.m.path("big")))
        self.assert_files({k: v for k, v in self.files.items() if k != "big"})
        self.stop()

    def test_h_chunk_past_eof(self):
        """A dirty chunk past a file's end (what a crash between a growth's
        chunk record and its size's once left, issue 39): reported by path
        (exit 4); --repair drops it (exit 1); then clean, and a mount reads
        every file and leaves nothing in RAM at its unmount."""
        self.make_fs()
        gens = sorted(n for n in os.listdir(self.state_dir) if n.startswith("journal."))
        self.assertTrue(gens, os.listdir(self.state_dir))
        body = bytes([10]) + struct.pack("<QQ", self.inos["small"], 3)  # JR_CHUNK_DIRTY
        ln = struct.pack("<I", len(body))
        with open(os.path.join(self.state_dir, gens[-1]), "ab") as f:
            f.write(ln + struct.pack("<I", crc32c(ln + body)) + body)
        _, out, _ = self.fsck(expect=4)
        self.assertIn("/small: 1 chunks past its end (100 bytes)", out)
        _, out, _ = self.fsck("--repair", expect=1)
        self.assertIn("/small: 1 chunks past its end (100 bytes) -- dropped", out)
        self.assertClean("--verify-data")
        hot = os.path.join(tempfile.mkdtemp(prefix="spw-fsck-hot-", dir="/dev/shm"), "hot")
        self.addCleanup(shutil.rmtree, os.path.dirname(hot), True)
        self.start("after", hot_dir=hot)
        self.assert_files(self.files)
        self.assertEqual(self.state(self.m.path("small"))["dirty"], 0)
        self.stop()
        self.assertEqual([n for n in os.listdir(hot) if not n.startswith(".")]
                         if os.path.exists(hot) else [], [])

    def test_d_unreferenced_segment(self):
        self.make_fs()
        segs = self.segments()
        sid = min(segs)
        extra = max(segs) + 1
        shutil.copyfile(segs[sid], os.path.join(self.cold, seg_name(extra)))
        size = os.path.getsize(segs[sid])
        _, out, _ = self.fsck(expect=4)
        m = re.search(r"^segment %d unreferenced \(([^),]+)" % extra, out, re.M)
        self.assertTrue(m, out)
        self.assertTrue(m.group(1).endswith(("bytes", "KiB", "MiB")), m.group(1))
        _, out, _ = self.fsck("--repair", expect=1)
        self.assertIn("segment %d unreferenced" % extra, out)
        self.assertNotIn(extra, self.segments())
        self.assertEqual(os.path.getsize(segs[sid]), size)
        self.assertClean("--verify-data")
        self.start("after-repair")
        self.assert_files(self.files)
        self.stop()

    def test_f_mounted_and_usage(self):
        self.make_fs()
        self.start("mounted")
        rc, out, err = self.fsck()
        self.assertEqual(rc, 8, out + err)
        self.assertEqual(out, "")
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(self.state_dir, err)
        # the mount is unharmed
        self.assert_files(self.files)
        self.stop()
        self.assertClean()
        for args in ([], ["--bogus", self.state_dir], [self.state_dir, self.state_dir]):
            r = subprocess.run([self.fsck_bin] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(r.returncode, 16, args)
            self.assertIn(b"usage", r.stderr)
        # not a state directory: operational error
        r = subprocess.run([self.fsck_bin, self.cold + "/nope"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 8)

    def test_g_repair_checkpoint_keeps_everything(self):
        """The checkpoint --repair writes from its own model: a remount on
        the same hot_dir has the same tree (types, modes, owners, times,
        links, xattrs, symlinks, data, including data only in RAM)."""
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        self.start("before", hot_dir=hot)
        inos = self.write_files({"d/a": (1, 2 * MiB + 1), "big": (4, 3 * MiB)})
        write_content(self.m.path("d/hot-only"), 5, MiB + 17)  # never spilled
        os.symlink("../big", self.m.path("d/link"))
        os.link(self.m.path("big"), self.m.path("d/big-too"))
        os.mkfifo(self.m.path("fifo"), 0o640)
        os.setxattr(self.m.path("d/a"), "user.color", b"blue")
        os.chmod(self.m.path("d"), 0o751)
        os.chown(self.m.path("big"), 1234, 5678)
        os.utime(self.m.path("d/a"), ns=(1_000_000_123, 2_000_000_456))
        before = self.walk()
        self.stop()
        # a damaged chunk with a good copy elsewhere: --repair journals the
        # new location and ends with a checkpoint of its own model
        self.inos = inos
        sid, e = self.seg_holding("d/a", chunk=0)
        spare = max(self.segments()) + 1
        copy_segment(self.segments()[sid], os.path.join(self.cold, seg_name(spare)), spare)
        flip_byte(self.segments()[sid], e[4] + 10)
        cks = sorted(n for n in os.listdir(self.state_dir) if n.startswith("checkpoint."))
        _, out, _ = self.fsck("--verify-data", "--repair", expect=1)
        self.assertIn("chunk 0 of /d/a: crc mismatch in segment %d -- relocated" % sid, out)
        cks2 = sorted(n for n in os.listdir(self.state_dir) if n.startswith("checkpoint."))
        self.assertGreater(cks2[-1], cks[-1], "--repair wrote no checkpoint")
        self.assertClean("--verify-data")
        self.start("after", hot_dir=hot)
        after = self.walk()
        self.stop()
        self.assertEqual(after, before)
        self.assertIn(("/big", inos["big"]), [(k, v["ino"]) for k, v in after.items()])

    def walk(self):
        out = {}
        for d, dirs, names in os.walk(self.m.mnt):
            for n in dirs + names:
                p = os.path.join(d, n)
                st = os.lstat(p)
                e = {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
                     "nlink": st.st_nlink, "ino": st.st_ino, "size": st.st_size,
                     "mtime": st.st_mtime_ns,
                     "xattrs": {x: os.getxattr(p, x, follow_symlinks=False)
                                for x in os.listxattr(p, follow_symlinks=False)
                                if not x.startswith("user.spillway.")}}
                if os.path.islink(p):
                    e["target"] = os.readlink(p)
                elif os.path.isfile(p):
                    e["sha"] = sha_file(p)
                out["/" + os.path.relpath(p, self.m.mnt)] = e
        return out


class TestRebuild(FsckCase):

    def test_e_rebuild_from_stale_checkpoint(self):
        old = {"a1": (11, 3 * MiB), "dir/a2": (12, 2 * MiB + 7), "dir/a3": (13, 4000)}
        self.start("old")
        inos = self.write_files(old)
        os.mkdir(self.m.path("emptydir"))
        self.stop()
        cks = sorted(n for n in os.listdir(self.state_dir) if n.startswith("checkpoint."))
        self.assertTrue(cks, os.listdir(self.state_dir))
        saved = os.path.join(self.cold, "saved-" + cks[-1])
        shutil.copyfile(os.path.join(self.state_dir, cks[-1]), saved)

        # later: a1 grows (its last chunks rewritten), a3 overwritten, new files
        self.start("new")
        write_content(self.m.path("a1"), 21, 2 * MiB, flags=os.O_WRONLY)
        fd = os.open(self.m.path("a1"), os.O_WRONLY | os.O_APPEND)
        os.write(fd, content(22, 0, MiB + 99))
        os.close(fd)
        write_content(self.m.path("dir/a3"), 23, 5000)
        self.spill(self.m.path("a1"))
        self.spill(self.m.path("dir/a3"))
        new = {"b1": (31, 2 * MiB + 1), "dir/b2": (32, 300)}
        inos.update(self.write_files(new))
        a1 = content(21, 0, 2 * MiB) + content(11, 2 * MiB, MiB) + content(22, 0, MiB + 99)
        self.stop()

        # the journal is lost and the checkpoint stale
        for n in os.listdir(self.state_dir):
            if n.startswith(("journal.", "checkpoint.")):
                os.unlink(os.path.join(self.state_dir, n))
        shutil.copyfile(saved, os.path.join(self.state_dir, cks[-1]))
        # a plain check sees the newer segments as unreferenced
        _, out, _ = self.fsck(expect=4)
        self.assertIn("unreferenced", out)

        _, out, _ = self.fsck("--rebuild", "--verify-data", expect=1)
        for rel in new:
            self.assertIn("recovered /lost+found/#%d" % inos[rel], out)
        self.assertClean("--verify-data")

        self.start("rebuilt")
        self.assertEqual(sha_file(self.m.path("a1")), (hashlib.sha256(a1).hexdigest(), len(a1)),
                         "a1 after --rebuild")
        self.assert_files({"dir/a2": old["dir/a2"], "dir/a3": (23, 5000)})
        self.assertTrue(os.path.isdir(self.m.path("emptydir")))
        self.assert_files({"#%d" % inos[rel]: v for rel, v in new.items()}, root="lost+found")
        self.assertEqual(sorted(os.listdir(self.m.path("lost+found"))),
                         sorted("#%d" % inos[rel] for rel in new))
        self.assertFalse(os.path.exists(self.m.path("b1")))
        # the rebuilt filesystem keeps working: a new file does not reuse a number
        write_content(self.m.path("c1"), 41, 1000)
        self.assertNotIn(os.stat(self.m.path("c1")).st_ino, inos.values())
        self.stop()
        self.assertClean()

    def test_e_rebuild_without_any_checkpoint(self):
        """The whole state lost (journals and checkpoints): every file comes
        back as /lost+found/#<ino> with its data; the uuid comes from tiers."""
        self.make_fs()
        for n in os.listdir(self.state_dir):
            if n.startswith(("journal.", "checkpoint.")):
                os.unlink(os.path.join(self.state_dir, n))
        rc, out, err = self.fsck()
        self.assertEqual(rc, 8, out + err)
        _, out, _ = self.fsck("--rebuild", expect=1)
        self.assertEqual(len(re.findall(r"^recovered /lost\+found/#\d+ ", out, re.M)),
                         len(self.files), out)
        self.assertClean("--verify-data")
        self.start("rebuilt")
        self.assert_files({"#%d" % self.inos[rel]: v for rel, v in self.files.items()},
                          root="lost+found")
        self.stop()


if __name__ == "__main__":
    harness.main()
