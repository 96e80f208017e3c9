#!/usr/bin/env python3
"""spillway overlay benchmark (issue 26): random writes into cold data.

One run prints, side by side:

  sqlite   bench/sqlite_build.py (a table with an index, batches of 5,000
           inserts committed one by one, a delete and an update pass, an
           integrity check and a digest of the content) building a --db-size
           database: on tmpfs (the physical limit), then on spillway with
           hot_size=--hot-size and cold_writes=overlay (the default) and, with
           --restore, cold_writes=restore (the behaviour before overlays), at
           chunk_size 4M and 1M. For each: wall time and its ratio to tmpfs,
           bytes spilled and restored as multiples of the database's size,
           and the digest check (same bytes as on tmpfs).
  fio      fio --rw=randwrite --bs=4k (then randrw) on a file 4x hot_size,
           laid out and evicted first, through spillway, and through libfuse's
           passthrough_ll over a plain file on the same cold disk (the FUSE
           floor): IOPS, ratio, and spillway's bytes spilled / restored per
           byte written.

Run as root (mounts, drop_caches):

  python3 bench/bench_overlay.py --build build [--db-size 200M] [--hot-size 64M]
                                 [--restore] [--no-fio] [--cold /var/tmp]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def moved(mnt):
    st = stats(mnt)
    return st["spilled"]["bytes"], st["restored"]["bytes"], st.get("overlay", {})


def mount_spillway(o, tag, hot_size, chunk, cold_writes):
    d = bl.work_roots(tag, o)
    args = [os.path.join(o.build, "spillway"), "-f", "-o",
            "hot_dir=%s/hot,hot_size=%s,chunk_size=%s,nvme=%s,cold_writes=%s,mem_pressure=off"
            % (d["shm"], hot_size, chunk, d["cold"], cold_writes), d["mnt"]]
    proc = bl.start_daemon("spillway-" + tag, args, d["mnt"], os.path.join(d["logs"], "log"))
    return d, proc


def unmount(name, proc, mnt):
    bl.CLEANUP.stop_daemon(name, proc, mnt)
    bl.CLEANUP.daemons = [x for x in bl.CLEANUP.daemons if x[1] is not proc]


def sqlite_run(path, size):
    t0 = time.monotonic()
    out = bl.run_tool([sys.executable, os.path.join(HERE, "sqlite_build.py"), path, "--size",
                       size], 7200, "sqlite build in %s" % path)
    r = json.loads(out.strip().splitlines()[-1])
    r["wall"] = time.monotonic() - t0
    return r


def bench_sqlite(o):
    bl.log("sqlite: a %s database, hot_size=%s" % (o.db_size, o.hot_size))
    shm = bl.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-ovl-tmpfs-", dir=o.tmpfs_root))
    ref = sqlite_run(shm, o.db_size)
    db = ref["db_bytes"]
    rows = [("tmpfs", ref["wall"], 1.0, 0, 0, "-")]
    modes = ["overlay"] + (["restore"] if o.restore else [])
    for chunk in ("4M", "1M"):
        for mode in modes:
            tag = "ovl-%s-%s" % (mode, chunk)
            d, proc = mount_spillway(o, tag, o.hot_size, chunk, mode)
            r = sqlite_run(d["mnt"], o.db_size)
            sp, rs, _ = moved(d["mnt"])
            ok = "same" if r["digest"] == ref["digest"] else "DIFFERS"
            rows.append(("spillway %s, chunk %s" % (mode, chunk), r["wall"],
                         r["wall"] / ref["wall"], sp / r["app_written"], rs / r["app_read"],
                         ok))
            unmount(tag, proc, d["mnt"])
    print("\nsqlite build, %s database (%.0f MiB), hot_size=%s"
          % (o.db_size, db / MiB, o.hot_size))
    print("(spilled and restored per byte the application wrote and read: %.0f MiB written,"
          " %.0f MiB read on tmpfs)" % (ref["app_written"] / MiB, ref["app_read"] / MiB))
    print("%-30s %9s %9s %14s %14s %8s" % ("", "wall s", "x tmpfs", "spilled/wrote",
                                          "restored/read", "content"))
    for name, wall, ratio, sp, rs, ok in rows:
        print("%-30s %9.1f %9.1f %14.2f %14.2f %8s" % (name, wall, ratio, sp, rs, ok))
    return rows


def fio_iops(path, rw, size, runtime):
    args = ["fio", "--name=ovl", "--filename=" + path, "--rw=" + rw, "--bs=4k",
            "--size=%d" % size, "--ioengine=psync", "--time_based", "--runtime=%d" % runtime,
            "--output-format=json", "--randseed=7"]
    out = bl.run_tool(args, runtime + 120, "fio %s on %s" % (rw, path))
    job = json.loads(out[out.index("{"):])["jobs"][0]
    wr = job["write"]
    rd = job["read"]
    return wr["iops"] + rd["iops"], wr["io_bytes"]


def lay_out(path, size):
    with open(path, "wb") as f:
        chunk = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def bench_fio(o):
    size = 4 * bl.parse_size(o.hot_size)
    rows = []
    for rw in ("randwrite", "randrw"):
        # spillway: the file laid out, evicted, then written at random
        d, proc = mount_spillway(o, "fio-" + rw, o.hot_size, "4M", "overlay")
        f = os.path.join(d["mnt"], "f")
        lay_out(f, size)
        os.setxattr(f, "user.spillway.evict", b"1")
        sp0, rs0, _ = moved(d["mnt"])
        iops, written = fio_iops(f, rw, size, o.runtime)
        sp, rs, _ = moved(d["mnt"])
        unmount("fio-" + rw, proc, d["mnt"])
        # the FUSE floor: passthrough_ll over a plain file on the cold disk
        pd = bl.work_roots("fio-pt-" + rw, o)
        pt = bl.run_tool(["sh", os.path.join(HERE, "build_passthrough.sh"), pd["logs"]], 300,
                         "build passthrough_ll").strip().splitlines()[-1]
        src = os.path.join(pd["cold"], "src")
        os.mkdir(src)
        pproc = bl.start_daemon("passthrough_ll", [pt, "-f", "-o", "source=" + src, pd["mnt"]],
                                pd["mnt"], os.path.join(pd["logs"], "pt.log"))
        pf = os.path.join(pd["mnt"], "f")
        lay_out(pf, size)
        bl.drop_caches()
        piops, _ = fio_iops(pf, rw, size, o.runtime)
        unmount("passthrough_ll", pproc, pd["mnt"])
        rows.append((rw, iops, piops, (sp - sp0) / max(written, 1), (rs - rs0) / max(written, 1)))
    print("\nfio 4k on a file of %s (4x hot_size), %ds each" % (bl.fmt_size(size), o.runtime))
    print("%-10s %12s %16s %8s %16s %16s" % ("", "spillway", "passthrough_ll", "ratio",
                                          "spilled/written", "restored/written"))
    for rw, a, b, sp, rs in rows:
        print("%-10s %12.0f %16.0f %8.2f %16.1f %16.1f" % (rw, a, b, a / b if b else 0, sp, rs))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--db-size", default="200M")
    ap.add_argument("--hot-size", default="64M")
    ap.add_argument("--restore", action="store_true",
                    help="also run cold_writes=restore (slow: the behaviour before overlays)")
    ap.add_argument("--no-fio", action="store_true")
    ap.add_argument("--runtime", type=int, default=30)
    ap.add_argument("--cold", dest="cold_root", default="/var/tmp")
    ap.add_argument("--tmpfs", dest="tmpfs_root", default="/dev/shm")
    o = ap.parse_args()
    o.build = os.path.abspath(o.build)
    o.targets = ["spillway"]
    o.spillway_bin = os.path.join(o.build, "spillway")
    o.spillway_opts, o.spillway_env = "", []

    def body():
        print(json.dumps(bl.environment(o)))
        bench_sqlite(o)
        if not o.no_fio:
            bench_fio(o)

    return bl.run_guarded(body)


if __name__ == "__main__":
    sys.exit(main())
