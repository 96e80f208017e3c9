"""
lib.tier - fixtures for mounts with a cold tier: what is in a cold directory
(seg_files, segments_in, temps_in, seg_footer: a segment file's footer, any
format version; seg_layout: what segments hold) and in hot_dir (hot_alloc), the virtual
xattrs (stats_of, file_state, and FileOps for test cases), TierCase (a mount
with one or more NVMe cold directories) and Tmpfs (a small tmpfs, for cold
directories that fill up).
"""

import errno
import json
import os
import shutil
import struct
import subprocess
import tempfile

import harness
from lib.data import MiB, content, first_diff, open_uncached

# --------------------------------------------------------------------------
# cold directories and hot_dir


def tmpfs_used(mnt):
    """Bytes a tmpfs holds, all its files at one instant (statvfs). A walk
    of the files (hot_alloc) while they change may count one before the
    evictor's punch and another after the write that took the room freed:
    more than was ever held at once."""
    st = os.statvfs(mnt)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def hot_alloc(hot_dir):
    """Bytes the hot files really allocate (independent of the daemon's count)."""
    total = 0
    try:
        with os.scandir(hot_dir) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not e.name.startswith("."):
                    total += st.st_blocks * 512
    except FileNotFoundError:
        pass
    return total


SEG_MAGIC = {b"SPWFOOT1": 1, b"SPWFOOT2": 2, b"SPWFOOT3": 3}


def seg_footer(path):
    """A segment file's footer (tier/segment/segment.h, format v1, v2 or v3):
    (version, footer_len, [(ino, chunk, gen, flags, off, len, crc,
    chunk_len)]); AssertionError when path holds no segment."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4096 + 20 or data[:8] != b"SPWSEG01" or data[-8:] not in SEG_MAGIC:
        raise AssertionError("%s: not a segment" % path)
    count, _crc, flen = struct.unpack_from("<III", data, len(data) - 20)
    version = SEG_MAGIC[data[-8:]]
    if flen > len(data) or struct.unpack_from("<I", data, 8)[0] != version:
        raise AssertionError("%s: not a segment" % path)
    out = []
    if version == 1:
        base = len(data) - 20 - 40 * count
        for i in range(count):
            ino, chunk, gen, ln, off, crc = struct.unpack_from("<QQQIQI", data, base + 40 * i)
            out.append((ino, chunk, gen, 0, off, ln, crc, ln))
    else:
        base = len(data) - 20 - 44 * count
        for i in range(count):
            out.append(struct.unpack_from("<QQIIQIII", data, base + 44 * i))
    return version, flen, out


def seg_layout(d, names=None):
    """What the segments `names` (default: all) of cold directory d hold, in
    bytes: data (the records' data extents), maps, padding (between records:
    what format v3's 4 KiB alignment costs), header and footer; and the
    format versions seen."""
    if names is None:
        names = [n for n in os.listdir(d) if n.startswith("seg-") and n.endswith(".spw")]
    out = {"data": 0, "maps": 0, "padding": 0, "hdr_foot": 0, "versions": set()}
    for n in names:
        p = os.path.join(d, n)
        version, flen, ents = seg_footer(p)
        size = os.path.getsize(p)
        out["versions"].add(version)
        out["hdr_foot"] += 4096 + flen
        recs = 0
        with open(p, "rb") as f:
            for _ino, _c, _g, flags, off, ln, _crc, _clen in ents:
                recs += ln
                dlen = ln
                if flags & 1:  # mapped: its data length is in the map's tail
                    f.seek(off + ln - 16)
                    dlen = int.from_bytes(f.read(8)[4:8], "little")
                out["data"] += dlen
                out["maps"] += ln - dlen
        out["padding"] += size - 4096 - flen - recs
    return out


def seg_files(d):
    """{name: size} of the finished segments in cold directory d."""
    out = {}
    for n in os.listdir(d):
        if n.startswith("seg-") and n.endswith(".spw"):
            try:
                out[n] = os.stat(os.path.join(d, n)).st_size
            except FileNotFoundError:
                pass
    return out


def extents_in(d):
    """The extent files in cold directory d (extents=on: d/extents/<ino>-<id>)."""
    e = os.path.join(d, "extents")
    return sorted(os.listdir(e)) if os.path.isdir(e) else []


def extent_bytes(d):
    """Bytes of the extent files in cold directory d."""
    total = 0
    for n in extents_in(d):
        try:
            total += os.stat(os.path.join(d, "extents", n)).st_size
        except FileNotFoundError:
            pass
    return total


def cold_scan(cold, skip=(".spillway",)):
    """{relative path: size} of the files under a cold directory (segments,
    temp segments), leaving out the state directory and lock files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(cold):
        if dirpath == cold:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for n in filenames:
            if n.endswith(".lock"):
                continue
            p = os.path.join(dirpath, n)
            try:
                out[os.path.relpath(p, cold)] = os.lstat(p).st_size
            except FileNotFoundError:
                pass
    return out


def segments_in(cold):
    return {p: s for p, s in cold_scan(cold).items()
            if os.path.basename(p).startswith("seg-")}


def temps_in(cold):
    return [p for p in cold_scan(cold) if os.path.basename(p).startswith(".tmp")]



# --------------------------------------------------------------------------
# the virtual xattrs


def stats_of(mnt):
    """The mount's user.spillway.stats, parsed."""
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def cold_written_bytes(st):
    """Bytes written to the cold tier, from a stats dict: spilled into
    segments, or written into extents (extents=on, the default: a stream under
    pressure, a cold big file; counted at its last writer's close or its
    move, a file written again counts again)."""
    return st["spilled"]["bytes"] + st.get("extents", {}).get("written_bytes", 0)


def cold_read_bytes(st):
    """Bytes read back from the cold tier, from a stats dict: restored into
    RAM, or read once from the segments straight into replies (admission,
    tier/admit)."""
    return st["restored"]["bytes"] + st.get("admission", {}).get("direct_read_bytes", 0)


def file_state(path):
    """A file's user.spillway.state as {"hot": n, "cold": n, ...}."""
    s = os.getxattr(path, "user.spillway.state").decode()
    return {k: int(v) for k, v in (f.split("=") for f in s.split())}


class FileOps:
    """Mixin for test cases: the per-file xattrs, and assertContent."""

    def state(self, path):
        return file_state(path)

    def evict(self, path):
        os.setxattr(path, "user.spillway.evict", b"1")

    def warm(self, path):
        os.setxattr(path, "user.spillway.warm", b"1")

    def pin(self, path, on):
        os.setxattr(path, "user.spillway.pin", b"1" if on else b"0")

    def content_log(self):
        """What a content mismatch adds to its message (a log tail, or "")."""
        return ""

    def assertReadEIO(self, path, length, off):
        """A read of path (uncached) at off fails with EIO: never other bytes."""
        fd = open_uncached(path)
        try:
            with self.assertRaises(OSError) as cm:
                os.pread(fd, length, off)
            self.assertEqual(cm.exception.errno, errno.EIO, path)
        finally:
            os.close(fd)

    def assertContent(self, path, tag, size, msg=""):
        """The whole file equals content(tag, 0, size), read uncached."""
        fd = open_uncached(path)
        try:
            self.assertEqual(os.fstat(fd).st_size, size, "%s: size %s" % (path, msg))
            for off in range(0, size, 4 * MiB):
                n = min(4 * MiB, size - off)
                got = os.pread(fd, n, off)
                exp = content(tag, off, n)
                if got != exp:
                    d = first_diff(got, exp)
                    self.fail("%s: wrong data at offset %d (in the read at %d, which got %d "
                              "bytes; zeros there: %s) %s\n%s"
                              % (path, off + d, off, len(got), got[d:d + 16].count(0) == 16,
                                 msg, self.content_log()))
        finally:
            os.close(fd)


# --------------------------------------------------------------------------
# a mount with a cold tier


class TierCase(FileOps, harness.SpwTestCase):
    """A mount with a cold tier; helpers for the virtual xattrs."""

    timeout = 90

    def cold_dir(self, parent="/var/tmp"):
        d = tempfile.mkdtemp(prefix="spw-cold-", dir=parent)
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def tier_mount(self, hot_size="64M", chunk_size="1M", cold=None, hot_tmpfs=None, **opts):
        """Mount with cold directories `cold` (default: one fresh dir).
        Extra options as keywords (min_spill_size="16M", restore="lazy").
        hot_tmpfs (a size): hot_dir on a tmpfs of its own, whose hot files'
        pages hot_pages() reads at one instant."""
        if cold is None:
            cold = [self.cold_dir()]
        self.cold = list(cold)
        o = ["chunk_size=" + chunk_size, "nvme=" + ":".join(self.cold)]
        # these tests follow chunks into segments and back (restores, GC,
        # placement): extents (the default) are the tests' own to ask for;
        # test_extents, test_extent_evict, test_scrub cover them
        opts.setdefault("extents", "off")
        o += ["%s=%s" % (k, v) for k, v in opts.items()]
        hot_dir = None
        if hot_tmpfs:
            t = Tmpfs(hot_tmpfs)
            self.addCleanup(t.stop)  # registered before the mount: unmounted after it
            self.hot_tmpfs = t.mnt
            hot_dir = os.path.join(t.mnt, "hot")
        self.m = self.mount(hot_size=hot_size, opts=o, hot_dir=hot_dir)
        if hot_tmpfs:  # the daemon's own files (its lock, the marker): not hot data
            self.hot_base = tmpfs_used(self.hot_tmpfs)
        self.mnt = self.m.mnt
        return self.m

    def hot_pages(self):
        """Bytes of the hot files' pages, all at one instant (hot_tmpfs)."""
        return tmpfs_used(self.hot_tmpfs) - self.hot_base

    def p(self, name):
        return self.m.path(name)

    def stats(self):
        return stats_of(self.mnt)

    def poll(self, pred, timeout, what):
        return harness.wait_until(pred, timeout, what, interval=0.02)

    def all_segs(self):
        out = set()
        for d in self.cold:
            out |= {os.path.join(d, n) for n in seg_files(d)}
        return out

    def content_log(self):
        return self.m.log_text(20)


# --------------------------------------------------------------------------
# small tmpfs mounts: cold directories that fill up, a hot_dir of its own


class Tmpfs:
    """A tmpfs of `size` on a fresh directory. Registered with the harness
    like a mount, so signals and the watchdog unmount it too."""

    def __init__(self, size):
        self.mnt = tempfile.mkdtemp(prefix="spw-cold-tmpfs-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs",
                            self.mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            os.rmdir(self.mnt)
            raise AssertionError("mount -t tmpfs failed: %s" % r.stdout.decode(errors="replace"))
        with harness._live_lock:
            harness._live.append(self)

    def abort(self):
        pass

    def stop(self):
        if harness.is_mounted(self.mnt):
            if subprocess.run(["umount", self.mnt], stderr=subprocess.DEVNULL).returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], stderr=subprocess.DEVNULL)
        if not harness.is_mounted(self.mnt):
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass
        with harness._live_lock:
            if self in harness._live:
                harness._live.remove(self)


