#!/usr/bin/env python3
"""
torch_io - the PyTorch / safetensors / NumPy side of test_torch.py, run with
the venv's Python (tests/pydeps.sh). Not a test by itself.

    torch_io.py write DIR            # writes the files, prints a JSON manifest
    torch_io.py read DIR MANIFEST [CHECK]  # reads them (every way, or one), prints JSON
    torch_io.py checks               # the names of the checks, as JSON

The files hold KV-cache-shaped tensors, [layers, 2, heads, tokens, head_dim]
(2 = keys and values), float16 and bfloat16, generated from fixed seeds so
the reader regenerates what it expects:

  kv.pt           torch.save of a dict of tensors (zip format)
  kv.safetensors  safetensors.torch.save_file, with metadata
  kv.f16          a raw numpy.memmap written through a shared mapping (w+)

read checks each file's sha256 (plain read) against the manifest, then
torch.load (copy) and torch.load(mmap=True), safe_open (get_tensor,
get_slice, metadata) and numpy.memmap(mode='r'): each tensor compared bit
for bit (as int16 views) with the regenerated one.
"""

import hashlib
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

KV_SHAPE = (4, 2, 8, 1024, 128)  # layers, k/v, heads, tokens, head_dim: 16 MiB in f16
KV2_SHAPE = (2, 2, 4, 512, 64)  # a second, bfloat16 cache: 1 MiB


def kv(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)


def expected():
    return {"kv": kv(1, KV_SHAPE, torch.float16), "kv_bf16": kv(2, KV2_SHAPE, torch.bfloat16),
            "st_kv": kv(3, KV_SHAPE, torch.float16), "mm_kv": kv(4, KV_SHAPE, torch.float16)}


def bits(t):
    """A tensor's raw bits (byte-exact comparison, NaN-proof)."""
    return t.contiguous().view(torch.int16)


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and \
        torch.equal(bits(a), bits(b))


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write(d):
    e = expected()
    pt = os.path.join(d, "kv.pt")
    torch.save({"kv": e["kv"], "kv_bf16": e["kv_bf16"], "tokens": KV_SHAPE[3]}, pt)
    st = os.path.join(d, "kv.safetensors")
    save_file({"kv": e["st_kv"], "kv_bf16": e["kv_bf16"]}, st,
              metadata={"model": "spillway-test", "tokens": str(KV_SHAPE[3])})
    mm = os.path.join(d, "kv.f16")
    m = np.memmap(mm, dtype=np.float16, mode="w+", shape=KV_SHAPE)
    m[:] = e["mm_kv"].numpy()
    m.flush()
    del m
    out = {}
    for p in (pt, st, mm):
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        out[os.path.basename(p)] = {"sha256": sha(p), "size": os.path.getsize(p)}
    return out


def drop_cache(path):
    """Drop the kernel's cached pages of path, so reads reach the daemon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


CHECKS = ("sha256 kv.pt", "sha256 kv.safetensors", "sha256 kv.f16", "torch.load(mmap=False)",
          "torch.load(mmap=True)", "safetensors safe_open", "numpy.memmap(mode=r)")


def read(d, manifest, only=None):
    """Run the checks (all, or only the one named `only`); [{check, ok, detail}]."""
    e = expected()
    res = []

    def wanted(name):
        return only is None or name == only

    def check(name, fn):
        if not wanted(name):
            return
        try:
            ok, detail = fn()
        except Exception as ex:  # noqa: BLE001 - every failure is reported
            ok, detail = False, "%s: %s" % (type(ex).__name__, ex)
        res.append({"check": name, "ok": bool(ok), "detail": detail})

    for name, want in manifest.items():
        p = os.path.join(d, name)
        if wanted("sha256 " + name):
            drop_cache(p)
        check("sha256 " + name, lambda p=p, want=want: (
            sha(p) == want["sha256"] and os.path.getsize(p) == want["size"],
            "size %d" % os.path.getsize(p)))

    pt = os.path.join(d, "kv.pt")
    for mmap in (False, True):
        if wanted("torch.load(mmap=%s)" % mmap):
            drop_cache(pt)

        def load_pt(mmap=mmap):
            obj = torch.load(pt, mmap=mmap, weights_only=True)
            return (same(obj["kv"], e["kv"]) and same(obj["kv_bf16"], e["kv_bf16"])
                    and obj["tokens"] == KV_SHAPE[3], "keys %s" % sorted(obj))
        check("torch.load(mmap=%s)" % mmap, load_pt)

    st = os.path.join(d, "kv.safetensors")
    if wanted("safetensors safe_open"):
        drop_cache(st)

    def load_st():
        with safe_open(st, framework="pt") as f:
            keys = sorted(f.keys())
            meta = f.metadata()
            kvt = f.get_tensor("kv")
            bf = f.get_tensor("kv_bf16")
            # a slice reads only part of the mapping: layer 2, values, heads 3..5
            sl = f.get_slice("kv")[2:3, 1:2, 3:6]
        return (keys == ["kv", "kv_bf16"] and meta == {"model": "spillway-test",
                                                      "tokens": str(KV_SHAPE[3])}
                and same(kvt, e["st_kv"]) and same(bf, e["kv_bf16"])
                and same(sl, e["st_kv"][2:3, 1:2, 3:6]), "keys %s meta %s" % (keys, meta))
    check("safetensors safe_open", load_st)

    mm = os.path.join(d, "kv.f16")
    if wanted("numpy.memmap(mode=r)"):
        drop_cache(mm)

    def load_mm():
        m = np.memmap(mm, dtype=np.float16, mode="r", shape=KV_SHAPE)
        ok = np.array_equal(m.view(np.int16), e["mm_kv"].numpy().view(np.int16))
        # and a strided read of one head across all layers
        ok = ok and np.array_equal(m[:, 0, 5, ::7].view(np.int16),
                                   e["mm_kv"].numpy()[:, 0, 5, ::7].view(np.int16))
        del m
        return ok, "shape %s" % (KV_SHAPE,)
    check("numpy.memmap(mode=r)", load_mm)
    return res


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        print(json.dumps(write(sys.argv[2])))
    elif len(sys.argv) >= 4 and sys.argv[1] == "read":
        with open(sys.argv[3]) as f:
            manifest = json.load(f)
        only = sys.argv[4] if len(sys.argv) > 4 else None
        if only is not None and only not in CHECKS:
            sys.stderr.write("unknown check %r (one of %s)\n" % (only, ", ".join(CHECKS)))
            return 2
        print(json.dumps(read(sys.argv[2], manifest, only)))
    elif len(sys.argv) == 2 and sys.argv[1] == "checks":
        print(json.dumps(CHECKS))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
