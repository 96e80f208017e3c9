#!/usr/bin/env python3
"""
test_crash_extents - the states a power loss can leave while files become
extents (tier/extent, DESIGN section 16), each one mounted and checked, with
the recorder and the checks of test_crash_states.py (README.md there).

What is recorded, and what is not:
* the daemon's own calls on its cold directories, as for any file: the
  extent's creation, the move of a stream's bytes into it (copy_file_range
  or sendfile: spw_record.c records the bytes that landed, read back), the
  daemon's writes into it (an adopted stream's later writes, the writes of
  an open through the daemon), its truncate, fdatasync and name's fsync,
  and the journal's JR_EXTENT / JR_EXTENT_CRC records (grant, seal, unseal,
  gone) with their syncs;
* not the kernel's writes into an extent through a passthrough open: they
  never pass through the daemon (nor through libc in any process). The
  workload knows them: an open the daemon passed through to an extent (the
  extents' open counter moved, the file has one) writes its bytes into the
  extent file the kernel was given, so the test appends that write to the
  log itself, right after the pwrite returned and before anything later (a
  record with the extent's path: crashlib replays it as the kernel's page
  cache write it is, durable only at a later fdatasync of the extent).
  Replaying the whole log must still give exactly what is on disk, which
  proves the model of the kernel's writes right. What stays out: writes
  through a shared mapping of an extent (passthrough mmap: not in this
  workload), and the order in which the kernel writes its dirty pages back
  (any subset of the unsynced writes may be on disk, as crashlib assumes
  for every file anyway).

The workload (ext_workload): a 17 MiB file written in RAM (not a stream)
and evicted into an extent (durable before its record); a 17 MiB stream
that moves into an extent mid-write as RAM passes low_watermark (the rest
of its writes go there through the daemon), fsync'd; a file created just
after, granted an extent at its open and written by the kernel: fsync'd,
written more, closed (sealed), then a journal sync (another file's fsync);
an overwrite that unseals it, closed (sealed again); a truncate, fsync; a
kernel write into the adopted stream, fsync; a writer open across a kill -9
(recovery seals the extent by its size on disk), written again after it; a
truncate to 0 that drops an extent (the file back in the hot tier, written,
fsync'd); an unlink of a file with an extent.

Checks of every state (on top of test_crash_states.py's): what was fsync'd,
or closed and sealed (or evicted into an extent) before a journal sync that
then completed, reads back byte for byte; the mount never fails; a file
never acknowledged reads what a disk can hold of it: each byte that of its
last fsync'd version or one a later write put there, or zero where that
version had none, at a size a version had or a later write reached (never
bytes it never had; EIO allowed);
`spillway-fsck --verify-data` after the mount and a clean unmount finds
every sealed extent's crcs right.

Run: python3 tests/crash/test_crash_extents.py --build BUILD_DIR
Knobs: those of test_crash_states.py (SPW_CRASH_STATES defaults to 160 here).
"""

import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402
import crashlib  # noqa: E402
import test_crash_states as tcs  # noqa: E402
from lib.data import KiB, MiB, content  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402

class ExtWorkload(tcs.Workload):
    """Workload that knows which of its writes the kernel made into an
    extent (a passthrough open), and keeps the history of the files that
    may be extents (for the sector checks)."""

    def __init__(self, mnt, log_path, colds):
        super().__init__(mnt, log_path)
        self.colds = colds
        self.loose = set()  # fids of files that are (or may become) extents
        self.kernel_writes = 0

    def create(self, name, loose=True):
        f = super().create(name)
        f.hist = []
        if loose:
            self.loose.add(f.fid)
        return f

    def extent_path(self, name):
        ino = os.stat(self.p(name)).st_ino
        for c in self.colds:
            d = os.path.join(c, "extents")
            for n in (os.listdir(d) if os.path.isdir(d) else []):
                if int(n.split("-")[0], 16) == ino:
                    return os.path.join(d, n)
        return None

    def open_w(self, name):
        """An open for writing; (fd, extent path when the daemon passed it
        through to the file's extent: the kernel writes it, else None)."""
        e0 = stats_of(self.mnt)["extents"]["opens"]
        fd = os.open(self.p(name), os.O_WRONLY)
        pt = stats_of(self.mnt)["extents"]["opens"] > e0
        path = self.extent_path(name) if pt else None
        if pt and path is None:
            os.close(fd)
            raise AssertionError("%s: an open passed through, no extent on disk" % name)
        return fd, path

    def write(self, name, off, size, sync=False, backwards=False, fd=None, kpath=None):
        """Fresh bytes at [off, off+size) in PIECE writes (backwards: last
        piece first, not a stream), each op; a passthrough open's writes
        logged as the kernel's. With fd, on that open (kpath its extent)."""
        f = self.by_name[name]
        own = fd is None
        if own:
            fd, kpath = self.open_w(name)
        try:
            pieces = [(p, min(tcs.PIECE, off + size - p)) for p in range(off, off + size, tcs.PIECE)]
            for pos, n in (reversed(pieces) if backwards else pieces):
                self.tag += 1
                b = content(self.tag, pos, n)

                def go(b=b, pos=pos):
                    if os.pwrite(fd, b, pos) != len(b):
                        raise AssertionError("short write to " + name)
                    if kpath:
                        os.write(self.logfd, crashlib.write_bytes(kpath, pos, b))
                        self.kernel_writes += 1
                i = self._op("pwrite %s %d+%d%s" % (name, pos, n, " (kernel)" if kpath else ""),
                             "data", f, go)
                if len(f.data) < pos + n:
                    f.data.extend(bytes(pos + n - len(f.data)))
                f.data[pos:pos + n] = b
                self._version(f, i)
                f.hist.append((len(f.versions) - 1, "w", pos, b))
            if sync:
                i = self._op("fsync " + name, "fsync", f, lambda: os.fsync(fd))
                f.fsyncs.append((i, len(f.versions) - 1))
        finally:
            if own:
                os.close(fd)
        return kpath

    def truncate(self, name, size):
        super().truncate(name, size)
        f = self.by_name[name]
        f.hist.append((len(f.versions) - 1, "t", size, None))

    def reboot(self, restart):
        """The base's; a version the remount showed (read back whole) goes
        into the histories too."""
        n = super().reboot(restart)
        for f in self.files:
            if f.versions and f.versions[-1][2] == n:
                f.hist.append((len(f.versions) - 1, "full", 0, bytes(f.data)))
        return n

    def sealed(self, name):
        self.wait("%s sealed at its last writer's close" % name,
                  lambda: file_state(self.p(name)).get("sealed") == 1)

    def journal_sync(self, via, names):
        """fsync of another file (its journal sync covers every record
        appended before it): each of names, sealed before it began, counts
        as synced at its current version."""
        f = self.by_name[via]
        fd = os.open(self.p(via), os.O_RDWR)
        try:
            n = self._op("fsync %s (journal sync for %s)" % (via, ", ".join(names)), "fsync", f,
                         lambda: os.fsync(fd))
        finally:
            os.close(fd)
        f.fsyncs.append((n, len(f.versions) - 1))
        for name in names:
            g = self.by_name[name]
            g.fsyncs.append((n, len(g.versions) - 1))


def ext_workload(w, restart):
    st = lambda: stats_of(w.mnt)["extents"]  # noqa: E731
    w.mkdir("d")
    w.create("d/j", loose=False)  # a small file: its fsyncs sync the journal
    w.write("d/j", 0, 5000, sync=True)
    w.fsync_dir("d")
    # (c) an evict of a big file all in RAM moves it into a sealed extent
    w.create("d/ev")
    w.write("d/ev", 0, 17 * MiB, backwards=True)
    if "extent" in file_state(w.p("d/ev")):
        raise AssertionError("d/ev became an extent before its evict: %s"
                             % file_state(w.p("d/ev")))
    w.evict("d/ev")
    fs = file_state(w.p("d/ev"))
    if fs.get("extent") != 1 or fs.get("sealed") != 1:
        raise AssertionError("the evict of d/ev made no sealed extent: %s" % fs)
    w.journal_sync("d/j", ["d/ev"])
    # (a) a stream of 16 MiB or more while RAM is above low_watermark moves
    # into an extent mid-write; its later writes go there through the daemon
    c0 = st()["created"]
    w.create("d/s")
    w.write("d/s", 0, 17 * MiB + 3 * KiB, sync=True)
    if st()["created"] != c0 + 1 or file_state(w.p("d/s")).get("extent") != 1:
        raise AssertionError("the stream d/s was not adopted: %s %s"
                             % (st(), file_state(w.p("d/s"))))
    w.sealed("d/s")
    # (b) a file created now (a stream moved into an extent less than 10 s
    # ago) gets an extent at its open: the kernel writes it
    w.create("d/g")
    if file_state(w.p("d/g")).get("extent") != 1:
        raise AssertionError("d/g got no extent at its open: %s" % file_state(w.p("d/g")))
    w.sealed("d/g")  # the create's close
    if not w.write("d/g", 0, 3 * MiB, sync=True):
        raise AssertionError("d/g's writer was not passed through to its extent")
    w.write("d/g", 3 * MiB, MiB + 100)  # not fsync'd: closed, sealed
    w.sealed("d/g")
    w.journal_sync("d/j", ["d/g"])  # closed and sealed, then a journal sync
    # an overwrite unseals it (its open journals it), its close seals it
    w.write("d/g", MiB + 4 * KiB, 64 * KiB)
    w.sealed("d/g")
    # truncate (through the daemon: unseal journaled, then the extent cut)
    w.truncate("d/g", 2 * MiB + 5)
    w.fsync("d/g")
    w.sealed("d/g")
    # the kernel writes into the adopted stream's extent, fsync'd
    if not w.write("d/s", 5 * MiB + 512, 256 * KiB, sync=True):
        raise AssertionError("d/s's writer was not passed through to its extent")
    w.sealed("d/s")
    # a writer open across a kill -9: the extent is unsealed when the daemon
    # dies; recovery seals it by its size on disk
    fd, kp = w.open_w("d/g")
    try:
        if not kp:
            raise AssertionError("d/g's writer was not passed through to its extent")
        w.write("d/g", 2 * MiB + 5, 300 * KiB, fd=fd, kpath=kp)
        w.reboot(restart)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass  # the connection died with the daemon
    if file_state(w.p("d/g")).get("sealed") != 1:
        raise AssertionError("d/g not sealed by recovery: %s" % file_state(w.p("d/g")))
    w.write("d/g", 0, 128 * KiB, sync=True)
    w.sealed("d/g")
    # a truncate to 0 with no opens: the extent goes (journaled gone before
    # its unlink), the file is a file of the hot tier again (no write-around
    # since the remount: no new extent), written and fsync'd there
    w.truncate("d/ev", 0)
    if "extent" in file_state(w.p("d/ev")):
        raise AssertionError("d/ev kept its extent at a truncate to 0: %s"
                             % file_state(w.p("d/ev")))
    w.write("d/ev", 0, 100 * KiB, sync=True)
    # an extent's file unlinked: its extent goes with it
    w.unlink("d/s")
    w.fsync_dir("d")


class ExtOracle(tcs.Oracle):
    """test_crash_states' oracle; a file that may be an extent and whose
    bytes are not required may read as a disk can keep a file written
    without fsync: each byte that of its last fsync'd version, or one a
    later write put there, or zero where that version had none (or a later
    truncate cut it); at a size some version had or a later write reached
    (a torn write: anywhere in it); or EIO."""

    def __init__(self, w, log):
        super().__init__(w, log)
        self.models = {}

    def model(self, f, low, high):
        """(bytes of version low, [(off, bytes) of the writes since, to
        high], where zeros may start, the sizes allowed, the writes' ranges),
        cached."""
        key = (f.fid, low, high)
        if key in self.models:
            return self.models[key]
        buf, writes, zero_from = bytearray(), [], None
        base = b""
        for vi, kind, a, b in f.hist:
            if vi > high:
                break
            if vi > low:
                if kind == "w":
                    writes.append((a, b))
                elif kind == "full":
                    writes.append((0, b))
                    zero_from = min(zero_from, len(b)) if zero_from is not None else len(b)
                else:
                    zero_from = min(zero_from, a) if zero_from is not None else a
                continue
            if kind == "full":
                buf = bytearray(b)
            elif kind == "w":
                if len(buf) < a + len(b):
                    buf.extend(bytes(a + len(b) - len(buf)))
                buf[a:a + len(b)] = b
            elif a < len(buf):
                del buf[a:]
            else:
                buf.extend(bytes(a - len(buf)))
        base = bytes(buf)
        zero_from = len(base) if zero_from is None else min(zero_from, len(base))
        sizes = {f.versions[vi][1] for vi in range(low, high + 1)}
        sizes |= {a + len(b) for a, b in writes}
        ranges = [(a, a + len(b)) for a, b in writes]
        self.models[key] = (base, writes, zero_from, sizes, ranges)
        return self.models[key]

    def plausible(self, f, low, high, data):
        """None when data is what a disk may keep of f, else why not."""
        base, writes, zero_from, sizes, ranges = self.model(f, low, high)
        n = len(data)
        if n not in sizes and not any(a < n < e for a, e in ranges):
            return "%d bytes: no version since its last fsync had that size, nor did a " \
                "write since end there (sizes %s)" % (n, sorted(sizes)[:8])
        cuts = {0, n, min(zero_from, n), min(len(base), n)}
        for a, e in ranges:
            cuts |= {min(a, n), min(e, n)}
        cuts = sorted(cuts)
        for x, y in zip(cuts, cuts[1:]):
            seg = data[x:y]
            over = [b[x - a:y - a] for a, b in writes if a <= x and y <= a + len(b)]
            here = base[x:y] + bytes(max(0, y - max(x, len(base))))
            if seg == here or seg in over or (x >= zero_from and not any(seg)):
                continue
            # a write torn inside it: byte by byte
            for p in range(x, y):
                v = data[p]
                if (p < len(base) and base[p] == v) or (p >= len(base) and v == 0) or \
                        (v == 0 and p >= zero_from) or \
                        any(a <= p < a + len(b) and b[p - a] == v for a, b in writes):
                    continue
                return "byte %d (0x%02x) is in no version since its last fsync" % (p, v)
        return None

    def check(self, k, found, mnt=None):
        required, allowed = self.expect(k)
        loose = {}
        for name, (s, size) in found.items():
            if name in required:
                continue
            for f in self.w.files:
                a = allowed.get(f.fid)
                if f.fid in self.w.loose and a and name in a[0]:
                    loose[name] = (f, a)
        bad = super().check(k, {n: v for n, v in found.items() if n not in loose}, mnt)
        for name, (f, a) in sorted(loose.items()):
            s, size = found[name]
            if size < 0 or any(f2.fid == f.fid and a[1] <= vi <= a[2]
                               for f2, vi in self.by_sha.get(s, [])):
                continue  # EIO of bytes never acknowledged, or a version
            with open(os.path.join(mnt, name), "rb") as fh:
                why = self.plausible(f, a[1], a[2], fh.read())
            if why:
                bad.append("%s (file %d, versions %d..%d allowed): %s"
                           % (name, f.fid, a[1], a[2], why))
        return bad


class CrashExtents(tcs.CrashStates):
    hot_size = "32M"
    # the base's tests run in test_crash_states.py, not again here
    test_crash_states = None
    test_first_mount_fsync_survives_posix_disk = None
    test_first_mount_torn_journal_header = None

    def setUp(self):
        super().setUp()
        # a 17 MiB file fits in RAM below spill_threshold (24 MiB); a
        # stream of 16 MiB is above low_watermark (12.8 MiB): it moves
        # seal_delay=0: the workload's "closed (sealed)" is at the close
        self.opts += ["extents=on", "low_watermark=0.4", "mem_pressure=off", "seal_delay=0"]

    def test_crash_states_of_extents(self):
        os.environ.setdefault("SPW_CRASH_STATES", "160")
        t0 = time.monotonic()
        w, log_path = self.record(ext_workload)
        t_rec = time.monotonic() - t0
        log = crashlib.Log(log_path, self.colds,
                           ordered_meta=os.environ.get("SPW_CRASH_UNORDERED", "") != "1")
        final = crashlib.scan(self.colds)
        diff = crashlib.diff_states(log.contents(len(log.recs)), final)
        self.assertEqual(diff, [], "replaying the whole log (the kernel's writes into "
                         "extents included) does not give what is on disk:\n%s"
                         % "\n".join(diff[:20]))
        # the log holds what the workload was for
        paths = [r.path for r in log.recs if r.type == crashlib.OPEN and r.path]
        exts = {p for p in paths if "/extents/" in p}
        self.assertGreaterEqual(len(exts), 3, "extents created: %s" % sorted(exts))
        copies = [r for r in log.recs if r.type == crashlib.WRITE and r.fd >= 0 and
                  len(r.data) > tcs.PIECE]
        self.assertTrue(copies, "no move of a stream's bytes into its extent was recorded")
        self.assertGreater(w.kernel_writes, 0)
        oracle = ExtOracle(w, log)
        self.assertEqual(len(oracle.B), len(w.ops))
        self.assertEqual(len(oracle.E), len(w.ops))
        states = self.choose(log)
        sys.stderr.write("\n[crash-ext] %d records (%d sync points, %d ops, %d kernel writes, "
                         "%.1f MiB) recorded in %.1fs; %d states\n"
                         % (len(log.recs), len(log.syncs), len(w.ops), w.kernel_writes,
                            os.path.getsize(log_path) / MiB, t_rec, len(states)))
        failures, required_checked, loose_checked = [], 0, 0
        t1 = time.monotonic()
        for n, (name, k, dropped) in enumerate(states):
            problems, nreq = self.check_state(log, oracle, k, dropped, n)
            required_checked += nreq
            if problems:
                failures.append("state %d (%s) at record %d of %d: %s\n  %s" % (
                    n, name, k, len(log.recs), self.describe(log, k, dropped),
                    "\n  ".join(problems)))
                if len(failures) >= int(os.environ.get("SPW_CRASH_MAX_FAILURES", "5")):
                    break
        sys.stderr.write("[crash-ext] %d states in %.1fs: %d fsync'd files checked byte for "
                         "byte, %d refused\n" % (n + 1, time.monotonic() - t1,
                                                  required_checked, len(self.refusals)))
        if failures:
            self.fail("%d crash state(s) failed (SPW_CRASH_SEED=%s):\n%s"
                      % (len(failures), os.environ.get("SPW_CRASH_SEED", "1"),
                         "\n".join(failures)))
        self.assertEqual(self.refusals, [], "a state refused to mount")
        self.assertGreater(required_checked, 0)

    def make_workload(self, mnt, log_path):
        return ExtWorkload(mnt, log_path, self.colds)


if __name__ == "__main__":
    harness.main()
