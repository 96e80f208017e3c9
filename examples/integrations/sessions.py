#!/usr/bin/env python3
"""
sessions - an inference node's long-context sessions, each owning a KV cache
file (safetensors), resumed in a Zipf-skewed order: a few hot sessions and a
long cold tail. Works on any directory (a tmpfs, a plain directory on a disk,
a spillway mount), so the same driver measures every store.

A session's file is a safetensors file with two float16 tensors: "kv", the
prompt's cache [layers, 2, heads, tokens, head_dim] (layer-major: layer 0 is
the first bytes after the header), and "tail" [new tokens, layers, 2, heads,
head_dim], the tokens generated since, one block per resume. The header is
padded to 4 KiB (the format allows trailing spaces), so an offload appends
the new block at the end of the file and rewrites the header in place: the
file is never rewritten whole (--offload rewrite writes it back whole
instead). Every byte is derived from the session id and the block's
generation (a random pattern per key, each 4 KiB stamped with the key and
its index); the driver keeps the crc32 of each part it wrote.

A resume: open, read the header and layer 0 (the first usable bytes: a
server can start the first layer's attention), read the rest (the whole
cache), close; verify the header (session, generation, shapes) and the
crc32 of the prompt cache and of every block; then append one block of
--append-tokens tokens and rewrite the header (the offload). Per resume it
records the time to the first usable bytes and to the whole cache (the
resume latency), and the offload's time. --loader mmap loads with the
safetensors library instead (safe_open maps the file; get_slice of layer 0,
then get_tensor of both).

--sessions takes one count or a rising list (40,80,160): at each level the
driver creates the missing sessions, then makes --resumes Zipf(--zipf) draws
over them (ranks mapped to sessions by a seeded permutation); it stops at
the first level where a cache failed to verify, an I/O error happened, or
(with --bound-ms) the p99 resume passed the bound. --cold-probe K then makes
K sessions cold (a spillway mount: the user.spillway.evict xattr; a plain
directory: fsync and posix_fadvise DONTNEED; a tmpfs: impossible, skipped)
and resumes each: the cost of bringing one cold session back.

On a spillway mount it also records, per resume, whether the file was all in
RAM at the open (user.spillway.state), whether the open was passed through
(passthrough.opens in user.spillway.stats) and the bytes read back from the
cold tier (restored into RAM, or read once straight from the segments with
admission), and per level: the hit rate, the hot set's passthrough share
(the top ranks that fit in a quarter of the hot tier, each after its first
resume), the warm resumes' (below) and the bytes read back per cold byte
resumed.

    python3 sessions.py DIR [DIR...] [--sessions 40,80,160] [--resumes 300] [--warmup 50]
                        [--zipf 1.0] [--tokens 1024] [--layers 8] [--heads 8]
                        [--head-dim 128] [--append-tokens 4] [--loader read|mmap]
                        [--offload append|rewrite] [--fsync] [--bound-ms 200]
                        [--cold-probe 20] [--seed 1] [--json FILE] [--keep]

The JSON (--json) is rewritten after every level, so a driver killed by the
OOM killer leaves the levels it finished. Exit status 0 when every cache
verified and no I/O failed (a level over --bound-ms ends the ramp, it is no
failure), 1 otherwise, 2 on bad arguments.

Needs: numpy, safetensors (tests/requirements-py.txt; no torch).
"""

import argparse
import ctypes
import json
import os
import struct
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kv_offload import mount_root, pct, spillway_stats  # noqa: E402

MiB = 1 << 20
HDR = 4096  # the header, padded: 8 bytes of length + JSON + spaces
STAMP = 4096  # every block of this many bytes starts with its stamp
PATTERN = 256 << 10  # the random pattern tiled through a part
READ = 4 << 20  # read loader: bytes per read
STATE_XATTR = "user.spillway.state"
EVICT_XATTR = "user.spillway.evict"
POSIX_FADV_DONTNEED = 4
_libc = ctypes.CDLL(None, use_errno=True)


class SessionError(Exception):
    """A resume that could not load, verify or offload its cache."""


# --------------------------------------------------------------------------
# Content: derived from (session, generation), known by its crc32


def part_bytes(session, gen, nbytes):
    """nbytes of a session's part (gen 0: the prompt cache; g >= 1: the
    block appended at its g-th offload): a random pattern seeded by the key,
    each 4 KiB stamped with the key and the block's index."""
    key = (session << 20) | gen
    rng = np.random.default_rng(key)
    pat = rng.integers(0, 1 << 63, size=PATTERN // 8, dtype=np.uint64)
    words = nbytes // 8
    a = np.resize(pat, words)
    a[:: STAMP // 8] = np.uint64(key << 24) + np.arange(-(-words // (STAMP // 8)),
                                                       dtype=np.uint64)
    return a.view(np.uint8)


def header(session, gen, shape, tail_tokens):
    layers, _, heads, tokens, head_dim = shape
    base = 2 * layers * 2 * heads * tokens * head_dim
    tail = 2 * tail_tokens * layers * 2 * heads * head_dim
    h = {"__metadata__": {"format": "spillway-sessions/1", "session": str(session),
                          "generation": str(gen)},
         "kv": {"dtype": "F16", "shape": list(shape), "data_offsets": [0, base]},
         "tail": {"dtype": "F16", "shape": [tail_tokens, layers, 2, heads, head_dim],
                  "data_offsets": [base, base + tail]}}
    j = json.dumps(h, separators=(",", ":")).encode()
    if len(j) > HDR - 8:
        raise SessionError("header of %d bytes does not fit in %d" % (len(j), HDR - 8))
    return struct.pack("<Q", HDR - 8) + j + b" " * (HDR - 8 - len(j))


class Session:
    """One session's file and what the driver knows it holds."""

    def __init__(self, sid, path):
        self.sid, self.path = sid, path
        self.gen = 0  # blocks appended since the prompt
        self.crc = []  # crc32 of part 0 (the prompt) and of each block
        self.resumed = 0  # resumes in the current level


class Driver:
    def __init__(self, args):
        self.a = args
        self.dirs = [os.path.abspath(d) for d in args.dir]
        self.dir = self.dirs[0]
        self.shape = (args.layers, 2, args.heads, args.tokens, args.head_dim)
        self.token_bytes = 2 * args.layers * 2 * args.heads * args.head_dim
        self.base_bytes = self.token_bytes * args.tokens
        self.layer_bytes = self.base_bytes // args.layers
        self.block_bytes = self.token_bytes * args.append_tokens
        self.sessions = []
        self.mnt = mount_root(self.dir)
        self.fstype = fstype_of(self.mnt)
        self.spillway = spillway_stats(self.mnt) is not None
        self.buf = bytearray(0)

    # ---- files

    def size_of(self, s):
        return HDR + self.base_bytes + self.block_bytes * s.gen

    def create(self, sid):
        d = self.dirs[sid % len(self.dirs)]
        s = Session(sid, os.path.join(d, "session-%05d.safetensors" % sid))
        base = part_bytes(sid, 0, self.base_bytes)
        blk = part_bytes(sid, 1, self.block_bytes)
        s.crc = [zlib.crc32(base), zlib.crc32(blk)]
        fd = os.open(s.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, header(sid, 1, self.shape, self.a.append_tokens), 0)
            write_all(fd, base, HDR)
            write_all(fd, blk, HDR + self.base_bytes)
            if self.a.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        s.gen = 1
        return s

    def load_read(self, s):
        """(first usable s, whole s, parts) with plain reads into one buffer."""
        size = self.size_of(s)
        if len(self.buf) < size:
            self.buf = bytearray(size)
        mv = memoryview(self.buf)
        t0 = time.monotonic()
        fd = os.open(s.path, os.O_RDONLY)
        try:
            read_exact(fd, mv[:HDR], 0)
            hdr = parse_header(self.buf[:HDR])
            end = HDR + self.layer_bytes
            read_exact(fd, mv[HDR:end], HDR)
            t_first = time.monotonic() - t0
            while end < size:
                n = min(READ, size - end)
                read_exact(fd, mv[end:end + n], end)
                end += n
            extra = os.pread(fd, 1, size)
        finally:
            os.close(fd)
        t_whole = time.monotonic() - t0
        if extra:
            raise SessionError("session %d: file longer than %d bytes" % (s.sid, size))
        return t_first, t_whole, hdr, mv[HDR:size]

    def load_mmap(self, s):
        """The same with the safetensors library (safe_open maps the file)."""
        from safetensors import safe_open
        t0 = time.monotonic()
        with safe_open(s.path, framework="np") as f:
            layer0 = f.get_slice("kv")[0]
            t_first = time.monotonic() - t0
            kv = f.get_tensor("kv")
            tail = f.get_tensor("tail")
            meta = f.metadata()
        t_whole = time.monotonic() - t0
        del layer0
        hdr = {"__metadata__": meta, "kv": {"shape": list(kv.shape)},
               "tail": {"shape": list(tail.shape)}}
        data = np.concatenate([kv.reshape(-1).view(np.uint8), tail.reshape(-1).view(np.uint8)])
        return t_first, t_whole, hdr, memoryview(data)

    def verify(self, s, hdr, data):
        meta = hdr.get("__metadata__") or {}
        want_tail = [self.a.append_tokens * s.gen] + list(self.shape[:1]) + [2] + \
            [self.shape[2], self.shape[4]]
        if meta.get("session") != str(s.sid) or meta.get("generation") != str(s.gen):
            return "header says session %s generation %s, expected %d/%d" % (
                meta.get("session"), meta.get("generation"), s.sid, s.gen)
        if hdr["kv"]["shape"] != list(self.shape) or hdr["tail"]["shape"] != want_tail:
            return "shapes %s/%s" % (hdr["kv"]["shape"], hdr["tail"]["shape"])
        if len(data) != self.base_bytes + self.block_bytes * s.gen:
            return "%d data bytes" % len(data)
        if zlib.crc32(data[:self.base_bytes]) != s.crc[0]:
            return "prompt cache crc mismatch"
        for g in range(1, s.gen + 1):
            off = self.base_bytes + (g - 1) * self.block_bytes
            if zlib.crc32(data[off:off + self.block_bytes]) != s.crc[g]:
                return "block %d crc mismatch" % g
        return None

    def offload(self, s, data):
        """Append the next block and rewrite the header (or, with --offload
        rewrite, write the whole file back)."""
        g = s.gen + 1
        blk = part_bytes(s.sid, g, self.block_bytes)
        crc = zlib.crc32(blk)
        t0 = time.monotonic()
        hdr = header(s.sid, g, self.shape, self.a.append_tokens * g)
        if self.a.offload == "append":
            fd = os.open(s.path, os.O_WRONLY)
            try:
                write_all(fd, blk, HDR + self.base_bytes + self.block_bytes * s.gen)
                write_all(fd, hdr, 0)
                if self.a.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        else:
            fd = os.open(s.path, os.O_WRONLY | os.O_TRUNC)
            try:
                write_all(fd, hdr, 0)
                write_all(fd, data, HDR)
                write_all(fd, blk, HDR + len(data))
                if self.a.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        s.gen = g
        s.crc.append(crc)
        return time.monotonic() - t0

    # ---- spillway's view of one file / of the mount

    def state(self, s):
        if not self.spillway:
            return None
        try:
            v = os.getxattr(s.path, STATE_XATTR).decode()
        except OSError:
            return None
        return {k: int(x) for k, x in (f.split("=") for f in v.split())}

    def counters(self):
        st = spillway_stats(self.mnt) if self.spillway else None
        if st is None:
            return None
        pt = st.get("passthrough") or {}
        # read back from the cold tier: restored into RAM, or read once
        # from the segments straight into replies (admission, tier/admit)
        direct = (st.get("admission") or {}).get("direct_read_bytes", 0)
        return {"restored": st["restored"]["bytes"], "cold_read": st["restored"]["bytes"] + direct,
                "spilled": st["spilled"]["bytes"],
                "pt_opens": pt.get("opens", 0), "pt_fallback": dict(pt.get("fallback") or {}),
                "hot_limit": st["hot"]["limit"], "hot_used": st["hot"]["used"],
                "errors": st["errors"]}

    # ---- one resume

    def resume(self, s):
        """Load, verify, offload. Returns the resume's record."""
        rec = {"sid": s.sid, "gen": s.gen, "size": self.size_of(s)}
        st = self.state(s)
        c0 = self.counters()
        if st is not None:
            chunks = st["hot"] + st["cold"] + st["restoring"]
            rec["all_hot"] = st["cold"] + st["restoring"] == 0
            rec["state"] = st
            rec["cold_bytes"] = (rec["size"] * (st["cold"] + st["restoring"]) // chunks
                                 if chunks else 0)
        load = self.load_mmap if self.a.loader == "mmap" else self.load_read
        try:
            t_first, t_whole, hdr, data = load(s)
        except (OSError, ValueError, SessionError) as e:
            raise SessionError("session %d: load: %s" % (s.sid, e))
        rec["first_ms"], rec["whole_ms"] = t_first * 1e3, t_whole * 1e3
        c1 = self.counters()
        why = self.verify(s, hdr, data)
        rec["ok"] = why is None
        if why:
            rec["error"] = why
            return rec
        try:
            rec["offload_ms"] = self.offload(s, data) * 1e3
        except OSError as e:
            raise SessionError("session %d: offload: %s" % (s.sid, e))
        if c0 and c1:
            rec["pt"] = c1["pt_opens"] - c0["pt_opens"] > 0
            rec["cold_read"] = c1["cold_read"] - c0["cold_read"]
            # why the load's open was not passed through (the counters'
            # words: cold, shared, room, ...; the offload's open is "write")
            why = [k for k, v in c1["pt_fallback"].items() if v > c0["pt_fallback"].get(k, 0)]
            if why:
                rec["fallback"] = why
        return rec

    # ---- a level: grow to n sessions, then the resumes

    def level(self, n, rng):
        t0 = time.monotonic()
        created = 0
        while len(self.sessions) < n:
            self.sessions.append(self.create(len(self.sessions)))
            created += 1
        create_s = time.monotonic() - t0
        ranks = np.arange(1, n + 1, dtype=np.float64) ** -self.a.zipf
        ranks /= ranks.sum()
        perm = rng.permutation(n)  # rank -> session
        draws = rng.choice(n, size=self.a.warmup + self.a.resumes, p=ranks)
        for s in self.sessions:
            s.resumed = 0
        c0 = None
        recs = []
        t1 = None
        for i, r in enumerate(draws):
            if i == self.a.warmup:
                c0, t1 = self.counters(), time.monotonic()
            s = self.sessions[perm[r]]
            rec = self.resume(s)
            rec["rank"], rec["nth"] = int(r), s.resumed
            s.resumed += 1
            if i >= self.a.warmup:
                recs.append(rec)
            if not rec["ok"]:
                break
        if t1 is None:
            c0, t1 = self.counters(), time.monotonic()
        wall = time.monotonic() - t1
        c1 = self.counters()
        out = {"sessions": n, "created": created, "create_s": round(create_s, 3),
               "create_MiBps": (created * self.size_of(self.sessions[-1]) / MiB / create_s
                                if created and create_s > 0 else None),
               "resumes": len(recs), "resume_s": round(wall, 3),
               "resumes_per_s": len(recs) / wall if wall > 0 else None,
               "bad": [r for r in recs if not r["ok"]],
               "first_ms": summary([r["first_ms"] for r in recs]),
               "whole_ms": summary([r["whole_ms"] for r in recs]),
               "offload_ms": summary([r["offload_ms"] for r in recs if "offload_ms" in r]),
               "bytes_resumed": sum(r["size"] for r in recs)}
        if c0 and c1:
            out["spillway"] = self.level_spillway(recs, c0, c1, perm)
        out["records"] = recs
        return out

    def level_spillway(self, recs, c0, c1, perm):
        """Hits, the hot set's passthrough share, read back per cold byte."""
        size = self.size_of(self.sessions[0])
        k = max(1, int(c1["hot_limit"] // 4 // size))  # top ranks in a quarter of the tier
        hot = [r for r in recs if r["rank"] < k and r["nth"] > 0]
        cold_bytes = sum(r.get("cold_bytes", 0) for r in recs)
        cold_read = c1["cold_read"] - c0["cold_read"]
        warm = warm_resumes(recs, self.a.warm_distance)
        for r in warm:
            r["warm"] = True
        return {"hot_limit": c1["hot_limit"], "hot_ranks": k,
                "warm": {"distance": self.a.warm_distance, "resumes": len(warm),
                         "in_ram": sum(1 for r in warm if r.get("all_hot")),
                         "in_ram_passthrough": sum(1 for r in warm
                                                   if r.get("all_hot") and r.get("pt")),
                         "passthrough": sum(1 for r in warm if r.get("pt")),
                         # nothing read back from the cold tier: the hot
                         # tier, passed through or not, or the kernel's cache
                         "from_ram": sum(1 for r in warm if r.get("cold_read") == 0)},
                "hot_set": sorted(int(perm[i]) for i in range(min(k, len(perm)))),
                "hits": sum(1 for r in recs if r.get("all_hot")),
                "passthrough": sum(1 for r in recs if r.get("pt")),
                "hot_resumes": len(hot),
                "hot_hits": sum(1 for r in hot if r.get("all_hot")),
                "hot_passthrough": sum(1 for r in hot if r.get("pt")),
                "cold_resumes": sum(1 for r in recs if not r.get("all_hot")),
                "cold_bytes": cold_bytes, "cold_read": cold_read,
                "restored": c1["restored"] - c0["restored"],
                "cold_read_per_cold_byte": cold_read / cold_bytes if cold_bytes else None,
                "spilled": c1["spilled"] - c0["spilled"],
                "pt_opens": c1["pt_opens"] - c0["pt_opens"],
                "pt_fallback": {k: v - c0["pt_fallback"].get(k, 0)
                                for k, v in c1["pt_fallback"].items()},
                "errors": c1["errors"]}

    # ---- cold probe

    def make_cold(self, s):
        """Nothing of s in RAM: on a mount its chunks evicted, and (as on a
        disk) the kernel's page cache of it dropped - with admission a
        chunk read once from its segment stays cold for spillway but its
        bytes stay in the kernel's cache."""
        if self.spillway:
            os.setxattr(s.path, EVICT_XATTR, b"1")
            deadline = time.monotonic() + 60
            while True:
                st = self.state(s)
                if st and st["hot"] == 0 and st["spilling"] == 0:
                    break
                if time.monotonic() > deadline:
                    raise SessionError("session %d: not cold 60 s after evict: %s" % (s.sid, st))
                time.sleep(0.005)
        drop_page_cache(s.path)

    def cold_probe(self, k, rng):
        if self.fstype == "tmpfs":
            return {"skipped": "a tmpfs holds everything in RAM: nothing is ever cold"}
        pick = rng.choice(len(self.sessions), size=min(k, len(self.sessions)), replace=False)
        recs = []
        c0 = self.counters()
        for i in pick:
            s = self.sessions[int(i)]
            self.make_cold(s)
            rec = self.resume(s)
            recs.append(rec)
            if not rec["ok"]:
                break
        c1 = self.counters()
        out = {"resumes": len(recs), "bad": [r for r in recs if not r["ok"]],
               "first_ms": summary([r["first_ms"] for r in recs]),
               "whole_ms": summary([r["whole_ms"] for r in recs]),
               "bytes": sum(r["size"] for r in recs)}
        if c0 and c1:
            out["cold_read"] = c1["cold_read"] - c0["cold_read"]
            out["restored"] = c1["restored"] - c0["restored"]
            out["cold_read_per_byte"] = (out["cold_read"] / out["bytes"] if out["bytes"]
                                         else None)
        out["records"] = recs
        return out


# --------------------------------------------------------------------------
# helpers


def warm_resumes(recs, d):
    """The resumes of sessions kept warm: the session's two previous resumes
    each came at most d other sessions before the next one. A tier that
    holds d + 1 sessions in LRU order has such a session in RAM (and a
    tier that promotes on the second access has promoted it)."""
    seen, out = {}, []
    for i, r in enumerate(recs):
        h = seen.setdefault(r["sid"], [])
        if len(h) >= 2 and all(len({x["sid"] for x in recs[a + 1:b]}) <= d
                               for a, b in ((h[-2], h[-1]), (h[-1], i))):
            out.append(r)
        h.append(i)
    return out


def drop_page_cache(path):
    """fsync, then posix_fadvise(DONTNEED): the kernel's copy of path goes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if _libc.posix_fadvise(fd, ctypes.c_long(0), ctypes.c_long(0), POSIX_FADV_DONTNEED):
            raise SessionError("%s: posix_fadvise failed" % path)
    finally:
        os.close(fd)


def write_all(fd, data, off):
    mv = memoryview(data).cast("B")
    while len(mv):
        n = os.pwrite(fd, mv, off)
        mv, off = mv[n:], off + n


def read_exact(fd, mv, off):
    while len(mv):
        n = os.preadv(fd, [mv], off)
        if n <= 0:
            raise SessionError("short file at offset %d" % off)
        mv, off = mv[n:], off + n


def parse_header(b):
    (n,) = struct.unpack("<Q", bytes(b[:8]))
    if n != HDR - 8:
        raise SessionError("header length %d" % n)
    try:
        return json.loads(bytes(b[8:HDR]).decode())
    except ValueError as e:
        raise SessionError("bad header: %s" % e)


def fstype_of(mnt):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                found = fields[fields.index("-", 6) + 1]
    return found


def summary(xs):
    if not xs:
        return None
    return {"p50": pct(xs, 50), "p99": pct(xs, 99), "max": max(xs), "n": len(xs)}


def sizes(text):
    try:
        v = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError("--sessions: %r is not a count or a list of counts "
                                         "(e.g. 40,80,160)" % text)
    if not v or min(v) < 1 or v != sorted(v):
        raise argparse.ArgumentTypeError("--sessions: %r must be rising positive counts" % text)
    return v


def report(res, out):
    def ms(d):
        return "-" if not d else "p50 %.1f / p99 %.1f / max %.1f ms" % (d["p50"], d["p99"],
                                                                      d["max"])
    for lv in res["levels"]:
        print("N=%d: %d resumes, %.1f/s; first usable %s; whole %s; offload %s%s"
              % (lv["sessions"], lv["resumes"], lv["resumes_per_s"] or 0, ms(lv["first_ms"]),
                 ms(lv["whole_ms"]), ms(lv["offload_ms"]),
                 "; %d FAILED" % len(lv["bad"]) if lv["bad"] else ""), file=out)
        sp = lv.get("spillway")
        if sp:
            print("  spillway: %d/%d resumes all in RAM, %d passed through; warm resumes "
                  "(D=%d) %d/%d passed through, %d read nothing from the cold tier; hot set "
                  "(top %d ranks) %d/%d passed through; "
                  "read back %.0f MiB for %.0f MiB cold resumed (%s; %.0f MiB into RAM); "
                  "spilled %.0f MiB"
                  % (sp["hits"], lv["resumes"], sp["passthrough"], sp["warm"]["distance"],
                     sp["warm"]["passthrough"], sp["warm"]["resumes"], sp["warm"]["from_ram"],
                     sp["hot_ranks"],
                     sp["hot_passthrough"], sp["hot_resumes"], sp["cold_read"] / MiB,
                     sp["cold_bytes"] / MiB,
                     "%.2fx" % sp["cold_read_per_cold_byte"] if sp["cold_read_per_cold_byte"]
                     is not None else "-", sp["restored"] / MiB, sp["spilled"] / MiB), file=out)
    cp = res.get("cold_probe")
    if cp and "skipped" not in cp:
        print("cold probe: %d sessions made cold, first usable %s, whole %s%s"
              % (cp["resumes"], ms(cp["first_ms"]), ms(cp["whole_ms"]),
                 ", read back %.2fx" % cp["cold_read_per_byte"] if cp.get("cold_read_per_byte")
                 else ""), file=out)
    print("sessions: %s" % res["verdict"], file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="+", help="where the sessions' files live (tmpfs, plain dir, "
                    "spillway); several: session i in the (i mod n)-th")
    ap.add_argument("--sessions", type=sizes, default=[40],
                    help="sessions, or a rising list of levels (default 40)")
    ap.add_argument("--resumes", type=int, default=300, help="measured resumes per level")
    ap.add_argument("--warmup", type=int, default=0, help="resumes before measuring, per level")
    ap.add_argument("--zipf", type=float, default=1.0, help="skew: P(rank r) ~ r^-zipf")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024, help="prompt tokens (1024: 32 MiB)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--append-tokens", type=int, default=4, help="new tokens per resume")
    ap.add_argument("--loader", choices=("read", "mmap"), default="read")
    ap.add_argument("--offload", choices=("append", "rewrite"), default="append")
    ap.add_argument("--fsync", action="store_true", help="fsync every offload")
    ap.add_argument("--bound-ms", type=float, help="stop at the level whose p99 resume passes this")
    ap.add_argument("--cold-probe", type=int, default=0, metavar="K",
                    help="then resume K sessions made cold, one at a time")
    ap.add_argument("--warm-distance", type=int, default=3, metavar="D",
                    help="spillway: a resume is warm when the session's two previous "
                    "resumes came at most D other sessions apart (default 3)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the results here (after every level)")
    ap.add_argument("--keep", action="store_true", help="leave the files in DIR")
    args = ap.parse_args()
    for name in ("resumes", "layers", "heads", "tokens", "head_dim", "append_tokens"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.warmup < 0 or args.cold_probe < 0 or args.zipf < 0:
        ap.error("--warmup, --cold-probe and --zipf must not be negative")
    for x in args.dir:
        os.makedirs(x, exist_ok=True)
    d = Driver(args)
    if d.layer_bytes * args.layers != d.base_bytes or d.block_bytes % STAMP or \
            d.layer_bytes % STAMP:
        ap.error("the shape must give 4 KiB multiples per layer and per block")
    rng = np.random.default_rng(args.seed)
    res = {"dirs": d.dirs, "mount": d.mnt, "fstype": d.fstype, "spillway": d.spillway,
           "args": vars(args), "cache_bytes": d.base_bytes, "block_bytes": d.block_bytes,
           "levels": [], "ok": True, "stopped": None}
    print("sessions: KV caches of %.1f MiB (%s float16) + %d KiB per resume, in %s (%s%s)"
          % (d.base_bytes / MiB, "x".join(map(str, d.shape)), d.block_bytes >> 10, " ".join(d.dirs),
             d.fstype, ", spillway" if d.spillway else ""), flush=True)

    def save():
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(res, f)
            os.replace(tmp, args.json)

    try:
        for n in args.sessions:
            try:
                lv = d.level(n, rng)
            except (SessionError, OSError) as e:
                res.update(ok=False, stopped="error at N=%d: %s" % (n, e))
                break
            res["levels"].append(lv)
            report({"levels": [lv], "verdict": "level done"}, sys.stderr)
            if lv["bad"]:
                res.update(ok=False, stopped="N=%d: %d caches failed to verify: %s"
                           % (n, len(lv["bad"]), lv["bad"][0].get("error")))
            elif args.bound_ms and lv["whole_ms"] and lv["whole_ms"]["p99"] > args.bound_ms:
                res["stopped"] = "N=%d: p99 resume %.1f ms > %.0f ms" % (
                    n, lv["whole_ms"]["p99"], args.bound_ms)
            else:
                res["passed"] = n  # the largest N that verified within the bound
            save()
            if res["stopped"]:
                break
        if res["ok"] and args.cold_probe and d.sessions:
            try:
                res["cold_probe"] = d.cold_probe(args.cold_probe, rng)
                if res["cold_probe"].get("bad"):
                    res.update(ok=False, stopped="cold probe: a cache failed to verify")
            except (SessionError, OSError) as e:
                res.update(ok=False, stopped="cold probe: %s" % e)
    finally:
        res["verdict"] = ("all caches verified" if res["ok"] else "FAILED: %s" % res["stopped"])
        if res["ok"] and res["stopped"]:
            res["verdict"] += " (%s)" % res["stopped"]
        save()
        if not args.keep:
            for s in d.sessions:
                try:
                    os.unlink(s.path)
                except OSError:
                    pass
    report(res, sys.stdout)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
