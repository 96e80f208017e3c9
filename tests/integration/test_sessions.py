#!/usr/bin/env python3
"""
test_sessions - long-context sessions on a spillway mount: KV caches resumed
in a skewed order, the case the hot tier exists for (issue 36).

* examples/integrations/sessions.py (run with the venv's Python,
  tests/pydeps.sh; made here if missing, never skipped) on a mount whose hot
  tier holds about a third of the sessions: 48 sessions of 4 MiB (+128 KiB
  per resume) through a 64 MiB tier, 300 resumes in a Zipf(1.0) order, each
  loading its cache, verifying it (crc32 of content derived from the session
  and its generation) and appending a block, then 8 sessions evicted and
  resumed cold. Asserted: every cache verified; the sessions kept warm (the
  two previous resumes each at most 3 other sessions apart, so an LRU tier of
  a quarter of this size holds them) are served from RAM: at least 90% of
  them read nothing back from the cold tier, and at least 90% of those found
  all in RAM are passed through (FUSE passthrough: the kernel reads the hot
  file; the mount's passthrough.opens grew as much); the cold tail
  costs about one read from the cold tier: bytes read back (restored into
  RAM, or read once from the segments with admission) at most 1.5x the cold
  bytes resumed (per level, and for the evicted sessions); no I/O or crc
  error.
* A session whose header was rewritten while its first chunk was cold (an
  overlay over the cold chunk, as the evictor can leave it between two
  resumes) is passed through again once a reader has brought it back whole
  (admit=always: a read brings what it reads into RAM): it is all in RAM,
  and the next open must not go through the daemon.
* Admission (the default admit=reread): a session whose first chunk is in
  RAM and the rest cold, read whole again and again, has its cold chunks
  promoted at their second read; then it is all in RAM and passed through.

Run: python3 test_sessions.py --build BUILD_DIR [-k pattern]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.tier import cold_written_bytes  # noqa: E402
from lib.venvpy import venv_python  # noqa: E402

MiB = 1 << 20
SESSIONS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "integrations",
                        "sessions.py")


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def state(path):
    v = os.getxattr(path, "user.spillway.state").decode()
    return {k: int(x) for k, x in (f.split("=") for f in v.split())}


def drop_kernel_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class TestSessions(SpwTestCase):
    timeout = 300

    @classmethod
    def setUpClass(cls):
        cls.py, _ = venv_python(["numpy", "safetensors"])

    def cold_dir(self):
        d = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_skewed_resumes(self):
        # mem_pressure=off here and below: the budget stays hot_size, so what
        # is in RAM is the tier's doing, not other tests' memory pressure
        # extents=off: this measures the hot tier's choice of what stays in
        # RAM; with extents (the default) sessions written under pressure
        # live in extents and the kernel's page cache keeps the warm ones
        m = self.mount(hot_size="64M", opts=["chunk_size=1M", "min_spill_size=4M",
                                             "mem_pressure=off", "nvme=" + self.cold_dir(),
                                             "extents=off"])
        out = os.path.join(self.tmpdir(), "res.json")
        s0 = stats(m.mnt)
        argv = [self.py, SESSIONS, m.path("kv"), "--sessions", "48", "--resumes", "300",
                "--tokens", "128", "--zipf", "1.0", "--cold-probe", "8", "--json", out]
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=240)
        text = (r.stdout + r.stderr).decode(errors="replace")
        s1 = stats(m.mnt)
        self.assertEqual(r.returncode, 0, text[-4000:])
        with open(out) as f:
            res = json.load(f)
        self.assertTrue(res["ok"], res["verdict"])
        self.assertTrue(res["spillway"], res)
        lv = res["levels"][0]
        self.assertEqual(lv["resumes"], 300)
        self.assertEqual(lv["bad"], [])
        self.assertTrue(all(rec["ok"] for rec in lv["records"]))
        sp = lv["spillway"]
        # the sessions are 3x the tier: most of the tail is cold at its resume
        self.assertEqual(lv["bytes_resumed"], sum(rec["size"] for rec in lv["records"]))
        self.assertGreater(sp["cold_resumes"], 100, text)
        self.assertGreater(cold_written_bytes(s1) - cold_written_bytes(s0), 48 * 4 * MiB - 64 * MiB)

        # the sessions kept warm are served from RAM: nothing read back from
        # the cold tier (the hot tier; with admission, bytes read once may
        # stay in the kernel's cache instead), and those found all in the
        # hot tier are passed through
        warm = sp["warm"]
        self.assertGreaterEqual(warm["resumes"], 20, text)
        misses = "\n".join("  %s #%s state %s, fallback %s, read back %s"
                           % (x["sid"], x["nth"], x.get("state"), x.get("fallback"),
                              x.get("cold_read"))
                           for x in lv["records"] if x.get("warm")
                           and not (x.get("pt") and x.get("cold_read") == 0))
        # (0.8: bytes read once stay in the kernel's cache, not in the tier,
        # and their re-reads never reach the daemon to be promoted; when the
        # kernel reclaims them under load, a warm resume reads them from the
        # cold tier: 44-49 of 50 measured, 47-49 mostly; docs/design.md)
        self.assertGreaterEqual(
            warm["from_ram"], 0.8 * warm["resumes"],
            "warm sessions read back from the cold tier: %d of %d; the warm resumes not "
            "passed through or not from RAM (session, resume, before the open):\n%s\n%s"
            % (warm["resumes"] - warm["from_ram"], warm["resumes"], misses, text[-3000:]))
        self.assertGreaterEqual(warm["in_ram"], 10, text)
        self.assertGreaterEqual(
            warm["in_ram_passthrough"], 0.9 * warm["in_ram"],
            "warm sessions all in RAM but not passed through: %d of %d:\n%s"
            % (warm["in_ram"] - warm["in_ram_passthrough"], warm["in_ram"], misses))
        pt_opens = s1["passthrough"]["opens"] - s0["passthrough"]["opens"]
        self.assertGreater(sp["passthrough"], 0)
        self.assertGreaterEqual(pt_opens, sp["passthrough"])

        # the cold tail costs about one restore each
        self.assertGreater(sp["cold_bytes"], 0)
        self.assertGreater(sp["cold_read"], 0)
        self.assertLessEqual(sp["cold_read"], 1.5 * sp["cold_bytes"], text)
        cp = res["cold_probe"]
        self.assertEqual(cp["resumes"], 8)
        self.assertEqual(cp["bad"], [])
        self.assertGreaterEqual(cp["cold_read"], 0.5 * cp["bytes"], cp)
        self.assertLessEqual(cp["cold_read"], 1.5 * cp["bytes"], cp)
        self.assertEqual(s1["errors"], {"io": 0, "crc": 0})
        self.assertEqual(os.listdir(m.path("kv")), [])
        out = r.stdout.decode(errors="replace")
        sys.stderr.write("\n  " + "\n  ".join(out.strip().splitlines()[1:]) + "\n")

    def test_overlaid_chunk_passed_through_once_whole(self):
        # restore=lazy: no background restore races the write into the cold
        # chunk (with restore=open an open queues it, and a write that comes
        # first leaves the same overlay); admit=always: a read brings what
        # it reads into RAM (the admission filter has its own case below)
        m = self.mount(hot_size="64M", opts=["chunk_size=1M", "restore=lazy", "admit=always",
                                             "mem_pressure=off", "nvme=" + self.cold_dir()])
        p = m.path("session")
        data = bytearray(os.urandom(4 * MiB + 8192))
        with open(p, "wb") as f:
            f.write(data)
        os.setxattr(p, "user.spillway.evict", b"1")
        harness.wait_until(lambda: state(p)["hot"] == 0 and state(p)["spilling"] == 0, 30,
                           "%s all cold (%s)" % (p, state(p)))
        # the offload rewrites the header while the chunk under it is cold
        hdr = os.urandom(4096)
        fd = os.open(p, os.O_WRONLY)
        try:
            self.assertEqual(os.pwrite(fd, hdr, 0), 4096)
        finally:
            os.close(fd)
        data[:4096] = hdr
        # the next resume reads it all back: every byte in RAM afterwards
        with open(p, "rb") as f:
            self.assertEqual(f.read(), bytes(data))
        drop_kernel_cache(p)
        st = state(p)
        self.assertEqual((st["cold"], st["restoring"]), (0, 0), st)
        s0 = stats(m.mnt)
        with open(p, "rb") as f:
            self.assertEqual(f.read(), bytes(data))
        s1 = stats(m.mnt)
        self.assertEqual(
            s1["passthrough"]["opens"] - s0["passthrough"]["opens"], 1,
            "a file all in RAM (%s) was not passed through (fallbacks %s -> %s): its chunk "
            "0 still counts as held in part after a reader filled it whole"
            % (st, s0["passthrough"]["fallback"], s1["passthrough"]["fallback"]))
        self.assertEqual(s1["errors"], {"io": 0, "crc": 0})

    def test_reread_after_a_chunk_in_ram_promoted(self):
        # admission (admit=reread, the default): a session whose first chunk
        # is in RAM (its header, written at every offload) and the rest cold
        # is read whole by one resume after another: the second read of each
        # cold chunk brings it into RAM, and then the file is passed through
        m = self.mount(hot_size="64M", opts=["chunk_size=1M", "restore=lazy",
                                             "mem_pressure=off", "nvme=" + self.cold_dir()])
        p = m.path("session")
        data = os.urandom(4 * MiB + 8192)
        with open(p, "wb") as f:
            f.write(data)
        os.setxattr(p, "user.spillway.evict", b"1")
        harness.wait_until(lambda: state(p)["hot"] == 0 and state(p)["spilling"] == 0, 30,
                           "%s all cold (%s)" % (p, state(p)))
        for _ in range(2):  # its head read twice: chunk 0 into RAM
            with open(p, "rb") as f:
                self.assertEqual(f.read(65536), data[:65536])
            drop_kernel_cache(p)
        harness.wait_until(lambda: state(p)["hot"] == 1 and state(p)["restoring"] == 0, 30,
                           "%s chunk 0 in RAM (%s)" % (p, state(p)))
        reads = []
        for _ in range(3):  # resumes: each reads it whole (the kernel's copy dropped)
            s0 = stats(m.mnt)
            with open(p, "rb") as f:
                self.assertEqual(f.read(), data)
            drop_kernel_cache(p)
            s1 = stats(m.mnt)
            direct = [(x.get("admission") or {}).get("direct_read_bytes", 0) for x in (s0, s1)]
            reads.append((state(p)["cold"], direct[1] - direct[0]))
        # the first whole read streams the cold chunks from their segments,
        # the second brings them into RAM: none cold, none read directly again
        self.assertEqual(reads[-1], (0, 0),
                         "(chunks cold, bytes read from the segments) after each whole read: %s "
                         "- a cold chunk after the chunk in RAM is never promoted" % reads)
        s0 = stats(m.mnt)
        with open(p, "rb") as f:
            self.assertEqual(f.read(), data)
        s1 = stats(m.mnt)
        self.assertEqual(s1["passthrough"]["opens"] - s0["passthrough"]["opens"], 1)
        self.assertEqual(s1["errors"], {"io": 0, "crc": 0})


if __name__ == "__main__":
    harness.main()
