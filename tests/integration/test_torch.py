#!/usr/bin/env python3
"""
test_torch - PyTorch, safetensors and NumPy memory maps on a spillway mount,
on hot files and on evicted ones, byte-exact.

tests/integration/torch_io.py (run with the venv's Python, tests/pydeps.sh;
made here if missing, never skipped) writes KV-cache-shaped tensors,
[layers, 2, heads, tokens, head_dim] in float16 (and a bfloat16 one), as
torch.save (kv.pt), safetensors (kv.safetensors) and a raw numpy.memmap
written through a shared mapping (kv.f16), then reads them back every way:
sha256 of each file, torch.load with and without mmap=True, safe_open
(get_tensor, get_slice, metadata; safetensors maps the file) and
numpy.memmap(mode='r'), each tensor compared bit for bit with the one
regenerated from its seed.

* Hot: the files stay in the hot tier (the state xattr shows no cold chunk
  before and after), every check passes.
* Evicted: before each check, every file is evicted
  (`setfattr -n user.spillway.evict -v 1`) and `getfattr -n
  user.spillway.state` must show all its chunks cold and none hot; the check
  then passes, and the mount's restored bytes grow (the read went through
  the restore path, not a cache).

* examples/integrations/kv_offload.py (a server offloading idle sessions'
  KV caches and resuming them) through a hot tier a third of its size, in
  safetensors and, with every file evicted first, in torch.save format.

Run: python3 test_torch.py --build BUILD_DIR [-k pattern]
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
from lib.tier import cold_read_bytes, cold_written_bytes  # noqa: E402
from lib.venvpy import venv_python  # noqa: E402

MiB = 1 << 20
CHUNK = MiB
TORCH_IO = os.path.join(HERE, "torch_io.py")
KV_OFFLOAD = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "integrations",
                          "kv_offload.py")
FILES = ("kv.pt", "kv.safetensors", "kv.f16")


def state(path):
    """`getfattr -n user.spillway.state` of path as {field: int}."""
    r = subprocess.run(["getfattr", "--only-values", "-n", "user.spillway.state", path],
                       capture_output=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("getfattr on %s: %s" % (path, r.stderr.decode(errors="replace")))
    return {k: int(v) for k, v in (f.split("=") for f in r.stdout.decode().split())}


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


class TorchCase(SpwTestCase):
    timeout = 240

    @classmethod
    def setUpClass(cls):
        cls.py, cls.versions = venv_python(["torch", "safetensors", "numpy"])

    def setUp(self):
        super().setUp()
        cold = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, cold, True)
        # room for every file in RAM: only an explicit evict makes them cold
        self.m = self.mount(hot_size="128M", opts=["chunk_size=1M", "nvme=" + cold])
        self.mnt = self.m.mnt
        self.work = self.tmpdir()

    def run_py(self, *args):
        r = subprocess.run([self.py, TORCH_IO] + list(args), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=180)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 0, "torch_io.py %s failed:\n%s" % (args[0], err[-4000:]))
        return json.loads(r.stdout.decode())

    def write(self):
        manifest = self.run_py("write", self.mnt)
        self.assertEqual(sorted(manifest), sorted(FILES), manifest)
        path = os.path.join(self.work, "manifest.json")
        with open(path, "w") as f:
            json.dump(manifest, f)
        # KV caches of 16 MiB (+1 MiB bf16) in each file: several chunks each
        for name, v in manifest.items():
            self.assertGreaterEqual(v["size"], 16 * MiB, name)
        return manifest, path

    def assertChecks(self, results, expect):
        self.assertEqual(sorted(r["check"] for r in results), sorted(expect), results)
        bad = [r for r in results if not r["ok"]]
        self.assertEqual(bad, [], "failed on %s:\n%s" % (self.mnt, json.dumps(bad, indent=1)))

    def checks(self):
        names = self.run_py("checks")
        self.assertEqual(len(names), 7, names)
        return names


class TestTorchHot(TorchCase):
    def test_hot_files(self):
        manifest, mpath = self.write()
        for name in FILES:
            st = state(self.m.path(name))
            self.assertEqual(st["cold"], 0, "%s: %s" % (name, st))
            self.assertGreaterEqual(st["hot"], -(-manifest[name]["size"] // CHUNK), st)
        self.assertChecks(self.run_py("read", self.mnt, mpath), self.checks())
        for name in FILES:
            self.assertEqual(state(self.m.path(name))["cold"], 0, name)
        self.assertEqual(stats(self.mnt)["errors"], {"io": 0, "crc": 0})


class TestTorchEvicted(TorchCase):
    def evict_all(self, manifest):
        for name in FILES:
            r = subprocess.run(["setfattr", "-n", "user.spillway.evict", "-v", "1",
                                self.m.path(name)], capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
        for name in FILES:
            chunks = -(-manifest[name]["size"] // CHUNK)

            def cold(p=self.m.path(name), n=chunks):
                st = state(p)
                return st if (st["hot"] == 0 and st["cold"] == n and st["spilling"] == 0
                              and st["segments"] > 0) else None
            harness.wait_until(cold, 30, "%s all %d chunks cold (%s)"
                               % (name, chunks, state(self.m.path(name))), interval=0.02)

    def test_evicted_files(self):
        manifest, mpath = self.write()
        total = sum(v["size"] for v in manifest.values())
        for check in self.checks():
            with self.subTest(check=check):
                self.evict_all(manifest)
                r0 = cold_read_bytes(stats(self.mnt))
                self.assertChecks(self.run_py("read", self.mnt, mpath, check), [check])
                got = cold_read_bytes(stats(self.mnt)) - r0
                # every check reads a whole 16 MiB KV cache, all of it cold:
                # it came from the cold tier (restored, or read once straight
                # from the segments), not a cache
                self.assertGreaterEqual(got, 16 * MiB, "%s read %d cold bytes" % (check, got))
                sys.stderr.write("\n  [evicted] %-24s ok, %5.1f MiB read cold\n"
                                 % (check, got / MiB))
        s = stats(self.mnt)
        self.assertGreaterEqual(cold_written_bytes(s), total)
        self.assertEqual(s["errors"], {"io": 0, "crc": 0})


class TestKvOffloadExample(SpwTestCase):
    """examples/integrations/kv_offload.py on a mount whose hot tier holds a
    third of the caches: offloaded caches spill, resumes restore them, every
    cache verifies; once in safetensors as it is, once in torch.save format
    with every file evicted before the resumes."""

    timeout = 240

    @classmethod
    def setUpClass(cls):
        cls.py, _ = venv_python(["torch", "safetensors"])

    def run_example(self, *extra):
        cold = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, cold, True)
        m = self.mount(hot_size="32M", opts=["chunk_size=1M", "nvme=" + cold,
                                             "min_spill_size=8M"])
        out = os.path.join(self.tmpdir(), "res.json")
        argv = [self.py, KV_OFFLOAD,
                m.path("kv"), "--sessions", "12", "--layers", "4", "--tokens", "512",
                "--json", out] + list(extra)
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=180)
        text = (r.stdout + r.stderr).decode(errors="replace")
        self.assertEqual(r.returncode, 0, text)
        with open(out) as f:
            res = json.load(f)
        self.assertEqual(res["bad"], [])
        total = res["sessions"] * res["cache_bytes"]
        self.assertEqual(res["cache_bytes"], 8 * MiB)
        self.assertGreaterEqual(res["spillway"]["spilled"], total - 32 * MiB, text)
        # the resumes read caches back from the cold tier: restored into RAM,
        # or read once straight from the segments (admission), or by the
        # kernel from an extent (an open passed through to it; extents=on,
        # the default); the mount is this run's alone
        st = stats(m.mnt)
        res["cold_read"] = cold_read_bytes(st)
        res["ext_opens"] = st["extents"]["opens"]
        self.assertTrue(res["cold_read"] > 0 or res["ext_opens"] > 0, text)
        self.assertIn("all 12 caches verified", text)
        self.assertEqual(os.listdir(m.path("kv")), [])
        sys.stderr.write("\n  " + "\n  ".join(text.strip().splitlines()[1:4]) + "\n")
        return res

    def test_safetensors(self):
        self.run_example()

    def test_torch_save_evicted(self):
        res = self.run_example("--format", "pt", "--evict")
        # every resume read its cache back from the cold tier: through the
        # daemon, or an open of its extent (8 MiB each) passed to the kernel
        self.assertGreaterEqual(res["cold_read"] + res["ext_opens"] * 8 * MiB, 12 * 8 * MiB, res)


if __name__ == "__main__":
    harness.main()
