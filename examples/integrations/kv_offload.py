#!/usr/bin/env python3
"""
kv_offload - offload the KV caches of idle sessions to a directory (a
spillway mount) with PyTorch, and bring them back when a session resumes.

An inference server keeps one KV cache per session, shaped
[layers, 2, heads, tokens, head_dim] (2 = keys and values), float16. When
RAM runs short it offloads idle sessions' caches to files and frees them;
when a session comes back its cache is loaded again. On a spillway mount
the files land in RAM (the hot tier) and the coldest are spilled to NVMe /
S3 in the background, so offloading is a RAM-speed write, and a resume
costs a restore only for sessions that went cold.

This script: writes SESSIONS caches (safetensors by default, or torch.save),
frees them, then resumes every session in a random order, loading its cache
(safetensors' safe_open maps the file; torch.load(mmap=True) likewise) and
checking it bit for bit against the cache regenerated from the session's
seed. With --evict the files are also evicted to the cold tier first
(setxattr user.spillway.evict), so every resume is a cold restore. Prints
offload and resume latencies (p50/p99) and, on a spillway mount, what the
mount spilled and restored. Exit status 0 only when every cache verified.

    python3 kv_offload.py DIR [--sessions 24] [--layers 8] [--heads 8]
                          [--tokens 2048] [--head-dim 128] [--format safetensors|pt]
                          [--evict] [--keep]

Needs: torch (CPU build), safetensors, numpy (tests/requirements-py.txt;
tests/pydeps.sh makes a venv with them).
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

torch = safe_open = save_file = None  # imported by main(): sessions.py uses the helpers


def import_torch():
    global torch, safe_open, save_file
    try:
        import torch
        from safetensors import safe_open
        from safetensors.torch import save_file
    except ImportError as e:
        sys.stderr.write("kv_offload: %s (pip install -r tests/requirements-py.txt)\n" % e)
        sys.exit(2)

MiB = 1 << 20
STATS_XATTR = "user.spillway.stats"


def mount_root(path):
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def cold_bytes(st):
    """Bytes written to the cold tier: into segments, or sealed in extents."""
    return st["spilled"]["bytes"] + st.get("extents", {}).get("written_bytes", 0)


def spillway_stats(mnt):
    try:
        return json.loads(os.getxattr(mnt, STATS_XATTR))
    except (OSError, ValueError):
        return None


def kv_cache(session, shape):
    """The KV cache of one session: deterministic from its number."""
    g = torch.Generator().manual_seed(10_000 + session)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(torch.float16)


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def offload(path, cache, fmt, session):
    if fmt == "safetensors":
        save_file({"kv": cache}, path, metadata={"session": str(session)})
    else:
        torch.save({"kv": cache, "session": session}, path)
    fd = os.open(path, os.O_RDONLY)  # durable before the RAM copy is dropped
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resume(path, fmt):
    """Load a cache back into RAM (a private copy, as a server would)."""
    if fmt == "safetensors":
        with safe_open(path, framework="pt") as f:
            return f.get_tensor("kv").clone(), int(f.metadata()["session"])
    obj = torch.load(path, mmap=True, weights_only=True)
    return obj["kv"].clone(), obj["session"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="where to offload (e.g. a directory on a spillway mount)")
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--format", choices=("safetensors", "pt"), default="safetensors")
    ap.add_argument("--evict", action="store_true",
                    help="evict every file to the cold tier before resuming (spillway only)")
    ap.add_argument("--seed", type=int, default=1, help="order of the resumes")
    ap.add_argument("--keep", action="store_true", help="leave the files in DIR")
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args()
    import_torch()

    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    shape = (args.layers, 2, args.heads, args.tokens, args.head_dim)
    nbytes = 2
    for n in shape:
        nbytes *= n
    ext = "safetensors" if args.format == "safetensors" else "pt"
    paths = [os.path.join(d, "session-%04d.%s" % (i, ext)) for i in range(args.sessions)]
    mnt = mount_root(d)
    before = spillway_stats(mnt)
    print("kv_offload: %d sessions, KV cache %s float16 = %.1f MiB each (%.0f MiB in all), "
          "%s files in %s" % (args.sessions, "x".join(map(str, shape)), nbytes / MiB,
                              args.sessions * nbytes / MiB, args.format, d))

    t_off = []
    for i, p in enumerate(paths):
        cache = kv_cache(i, shape)
        t0 = time.monotonic()
        offload(p, cache, args.format, i)
        t_off.append(time.monotonic() - t0)
        del cache  # the server frees the RAM copy

    if args.evict:
        if before is None:
            sys.stderr.write("kv_offload: --evict needs DIR on a spillway mount\n")
            return 2
        for p in paths:
            os.setxattr(p, "user.spillway.evict", b"1")

    order = list(range(args.sessions))
    random.Random(args.seed).shuffle(order)
    t_res = []
    bad = []
    for i in order:
        t0 = time.monotonic()
        cache, sid = resume(paths[i], args.format)
        t_res.append(time.monotonic() - t0)
        if sid != i or not bits_equal(cache, kv_cache(i, shape)):
            bad.append(i)
        del cache

    after = spillway_stats(mnt)
    res = {"sessions": args.sessions, "cache_bytes": nbytes, "format": args.format,
           "evicted": args.evict, "bad": bad,
           "offload_ms": {"p50": pct(t_off, 50) * 1e3, "p99": pct(t_off, 99) * 1e3,
                          "mean": statistics.mean(t_off) * 1e3},
           "resume_ms": {"p50": pct(t_res, 50) * 1e3, "p99": pct(t_res, 99) * 1e3,
                         "mean": statistics.mean(t_res) * 1e3}}
    print("offload: p50 %.1f ms, p99 %.1f ms per session (%.0f MiB/s)"
          % (res["offload_ms"]["p50"], res["offload_ms"]["p99"],
             nbytes / MiB / statistics.mean(t_off)))
    print("resume:  p50 %.1f ms, p99 %.1f ms per session (%.0f MiB/s)%s"
          % (res["resume_ms"]["p50"], res["resume_ms"]["p99"],
             nbytes / MiB / statistics.mean(t_res), ", every file evicted first"
             if args.evict else ""))
    if before is not None and after is not None:
        # to the cold tier: spilled into segments, or sealed in extents
        # (a file whose bytes all moved to one file on a cold directory)
        res["spillway"] = {
            "spilled": cold_bytes(after) - cold_bytes(before),
            "restored": after["restored"]["bytes"] - before["restored"]["bytes"]}
        res["spillway"]["hot_limit"] = after["hot"]["limit"]
        print("spillway %s: hot tier %d MiB; spilled %d MiB, restored %d MiB during the run"
              % (mnt, after["hot"]["limit"] // MiB, res["spillway"]["spilled"] // MiB,
                 res["spillway"]["restored"] // MiB))
    if not args.keep:
        for p in paths:
            os.unlink(p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if bad:
        print("kv_offload: %d of %d caches FAILED verification: sessions %s"
              % (len(bad), args.sessions, bad))
        return 1
    print("kv_offload: all %d caches verified" % args.sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
