#!/usr/bin/env python3
"""
numpy_mmap - large NumPy arrays on a spillway mount, saved with np.save and
mapped back with np.load(mmap_mode='r').

Writes arrays totalling SIZE bytes into DIR (mixed dtypes, deterministic
content), fsyncs them, drops their pages from the kernel's page cache, then
maps every array read-only and checks it byte for byte (sha256 of the mapped
buffer against the one taken before saving) and element for element at
sampled positions. On a mount whose hot tier is smaller than SIZE the first
arrays have been spilled to the cold tier by then, so the mapping faults them
back through spillway's restore path.

Prints per-array results and write / mmap-read throughput; with DIR on a
spillway mount also the mount's spilled/restored counters. Exit status 0 only
when every array verified.

    python3 numpy_mmap.py DIR SIZE [--array-size 32M] [--keep] [--no-drop-cache]

SIZE and --array-size take K/M/G/T suffixes (powers of 1024).
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.stderr.write("numpy_mmap: numpy is not installed "
                     "(Debian: apt-get install python3-numpy)\n")
    sys.exit(2)

MiB = 1 << 20
DTYPES = ("float32", "float64", "int64", "uint8", "float16", "int32")
STATS_XATTR = "user.spillway.stats"


def parse_size(s):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = s.strip().upper()
    if t.endswith("B"):
        t = t[:-1]
    suffix = t[-1:] if t[-1:] in units and t[-1:] != "" else ""
    num = t[:-1] if suffix else t
    try:
        v = int(num) * units[suffix]
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r (use e.g. 256M, 2G)" % s)
    if v <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % s)
    return v


def make_array(i, nbytes):
    """Array number i: about nbytes of a rotating dtype, 2-D, seeded by i."""
    dt = np.dtype(DTYPES[i % len(DTYPES)])
    n = max(1, nbytes // dt.itemsize)
    cols = 1024 if n >= 1024 else 1
    rows = n // cols
    rng = np.random.default_rng(1000 + i)
    if dt.kind == "f":
        wide = np.float64 if dt.itemsize == 8 else np.float32
        a = rng.standard_normal((rows, cols), dtype=wide).astype(dt, copy=False)
    else:
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, size=(rows, cols), dtype=dt, endpoint=True)
    return a


def sample_positions(i, shape, k=64):
    rng = np.random.default_rng(7000 + i)
    return [tuple(int(rng.integers(0, d)) for d in shape) for _ in range(k)]


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def spillway_stats(d):
    try:
        return json.loads(os.getxattr(d, STATS_XATTR))
    except (OSError, ValueError):
        return None


def rate(nbytes, secs):
    return nbytes / MiB / secs if secs > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory to write the arrays into (e.g. a spillway mount)")
    ap.add_argument("size", type=parse_size, help="total bytes of array data, e.g. 1G")
    ap.add_argument("--array-size", type=parse_size, default=32 * MiB,
                    help="bytes per array (default 32M)")
    ap.add_argument("--keep", action="store_true", help="leave the .npy files in DIR")
    ap.add_argument("--no-drop-cache", action="store_true",
                    help="do not drop the files' page cache before mapping them")
    args = ap.parse_args()

    d = os.path.abspath(args.dir)
    count = max(1, math.ceil(args.size / args.array_size))
    sizes = [args.array_size] * (count - 1) + [args.size - args.array_size * (count - 1)]
    print("numpy_mmap: %d arrays of up to %d MiB (%d MiB total) in %s"
          % (count, max(sizes) // MiB, args.size // MiB, d))

    # write: np.save each array, remember its digest and a few elements;
    # only np.save + fsync count towards the write time
    expect = []
    written = 0
    t_write = 0.0
    for i, nbytes in enumerate(sizes):
        a = make_array(i, nbytes)
        path = os.path.join(d, "array_%03d.npy" % i)
        pos = sample_positions(i, a.shape)
        expect.append(dict(path=path, dtype=a.dtype.str, shape=a.shape,
                           sha=hashlib.sha256(a.data).hexdigest(),
                           samples=[(p, a[p].item()) for p in pos]))
        t0 = time.monotonic()
        with open(path, "wb") as f:
            np.save(f, a)
            f.flush()
            os.fsync(f.fileno())
        t_write += time.monotonic() - t0
        written += a.nbytes
        del a
    print("write: %d MiB in %.2fs (%.0f MiB/s, np.save + fsync)"
          % (written // MiB, t_write, rate(written, t_write)))

    if not args.no_drop_cache:
        for e in expect:
            drop_cache(e["path"])

    # read back through mmap: fault every page in, then verify
    failures = 0
    mapped = 0
    t_fault = t_verify = 0.0
    for i, e in enumerate(expect):
        name = os.path.basename(e["path"])
        try:
            t0 = time.monotonic()
            m = np.load(e["path"], mmap_mode="r")
            if not isinstance(m, np.memmap):
                raise AssertionError("np.load did not return a memmap")
            flat = m.reshape(-1).view(np.uint8)
            # touch one byte per page: every page is faulted in from the mount
            int(flat[::4096].sum(dtype=np.uint64))
            t1 = time.monotonic()
            problems = []
            if m.dtype.str != e["dtype"] or tuple(m.shape) != tuple(e["shape"]):
                problems.append("dtype/shape %s%s, expected %s%s"
                                % (m.dtype.str, m.shape, e["dtype"], e["shape"]))
            elif hashlib.sha256(m.data).hexdigest() != e["sha"]:
                problems.append("sha256 of the mapped data differs")
            else:
                for p, v in e["samples"]:
                    got = m[p].item()
                    if not (got == v or (got != got and v != v)):  # NaN-safe
                        problems.append("element %s is %r, expected %r" % (p, got, v))
                        break
            t_fault += t1 - t0
            t_verify += time.monotonic() - t1
            mapped += m.nbytes
            del flat, m
        except (OSError, ValueError, AssertionError) as ex:
            problems = ["%s: %s" % (type(ex).__name__, ex)]
        if problems:
            failures += 1
            print("FAIL %s: %s" % (name, "; ".join(problems)))
        else:
            print("ok   %s %s %s" % (name, e["dtype"], "x".join(map(str, e["shape"]))))

    print("mmap read: %d MiB faulted in %.2fs (%.0f MiB/s); verified in %.2fs (%.0f MiB/s)"
          % (mapped // MiB, t_fault, rate(mapped, t_fault), t_verify,
             rate(mapped, t_verify)))

    st = spillway_stats(d)
    if st is not None:
        ext = st.get("extents", {})
        print("spillway: hot %d/%d MiB, spilled %d MiB, restored %d MiB, segments %d, "
              "extents %d"
              % (st["hot"]["used"] // MiB, st["hot"]["limit"] // MiB,
                 (st["spilled"]["bytes"] + ext.get("written_bytes", 0)) // MiB,
                 st["restored"]["bytes"] // MiB, st["segments"]["count"], ext.get("files", 0)))

    if not args.keep:
        for e in expect:
            try:
                os.unlink(e["path"])
            except OSError as ex:
                print("warning: cannot remove %s: %s" % (e["path"], ex))

    if failures:
        print("numpy_mmap: %d of %d arrays FAILED verification" % (failures, count))
        return 1
    print("numpy_mmap: all %d arrays verified" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
