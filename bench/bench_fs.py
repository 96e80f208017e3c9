#!/usr/bin/env python3
"""spillway foundation benchmark: tmpfs vs libfuse passthrough_ll vs spillway.

One run sets up three targets side by side on the same tmpfs (/dev/shm):
  tmpfs        a plain directory on tmpfs (the ceiling),
  passthrough  libfuse's passthrough_ll example mounted over a tmpfs directory
               (the FUSE peer),
  spillway     BUILD/spillway with hot_dir on tmpfs and no cold tier in use,
and measures, per target: sequential write (fio, 1 MiB psync, end_fsync),
sequential read with the page cache dropped, warm re-read, and create / stat /
stat-after-dropping-dentries / unlink rates (bench/metaops.c).

A warm-up round runs first and is discarded; then each round runs every
workload on every target in turn (targets interleaved to spread machine
noise), and the median of the rounds is reported with the ratios against the
issue's targets. Misses are informational: the exit status is non-zero only
when the harness itself fails (a mount, a tool, a short read...).

Everything it creates (mounts, daemons, temp dirs) is removed on every exit
path, including SIGINT/SIGTERM/SIGHUP. Run as root (drop_caches).
Python 3 standard library only.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from benchlib import (  # noqa: E402
    CLEANUP,
    GiB,
    HERE,
    REPO,
    MiB,
    BenchError,
    drop_caches,
    environment,
    fmt_ratio,
    fmt_size,
    fmt_val,
    fio_mibs,
    loadavg,
    log,
    parse_size,
    raise_nofile,
    run_guarded,
    run_tool,
    start_daemon,
)

TARGETS = ("tmpfs", "passthrough", "spillway_off", "spillway")
TARGET_TITLES = {"tmpfs": "tmpfs", "passthrough": "passthrough_ll",
                 "spillway_off": "spillway passthrough=off", "spillway": "spillway"}

# metric key -> (title, unit, goal); goal = (base target, minimum ratio) or None
METRICS = [
    ("write", "seq write 1M", "MiB/s", ("passthrough", 1.2)),
    ("read_cold", "seq read, cache dropped", "MiB/s", ("tmpfs", 0.9)),
    ("read_warm", "re-read, warm cache", "MiB/s", ("tmpfs", 0.9)),
    ("rand_read", "4k random read, hot", "MiB/s", ("tmpfs", 0.5)),
    # node RAM (Shmem + other page cache) per byte of the file, after it was
    # written, read and closed (the file still there)
    ("ram", "RAM per hot byte", "x", None),
    ("create", "create", "ops/s", ("passthrough", 0.8)),
    ("stat", "stat after create", "ops/s", ("passthrough", 0.8)),
    ("stat_cold", "stat, dentries dropped", "ops/s", ("passthrough", 0.8)),
    ("unlink", "unlink", "ops/s", ("passthrough", 0.8)),
]


# --------------------------------------------------------------------------
# Running tools


def fio_job(path, rw, size, timeout, invalidate=1):
    args = [
        "fio",
        "--name=" + rw,
        "--filename=" + path,
        "--rw=" + ("write" if rw == "write" else "read"),
        "--bs=1M",
        "--size=%d" % size,
        "--ioengine=psync",
        "--fallocate=none",
        "--invalidate=%d" % invalidate,
    ]
    return fio_mibs(args, path, "write" if rw == "write" else "read", size, timeout)


def fio_randread(path, size, timeout):
    args = ["fio", "--name=randread", "--filename=" + path, "--rw=randread", "--bs=4k",
            "--size=%d" % size, "--io_size=%d" % min(size, 256 * MiB), "--ioengine=psync",
            "--invalidate=0", "--randrepeat=1"]
    return fio_mibs(args, path, "read", min(size, 256 * MiB), timeout)


CG_ROOT = "/sys/fs/cgroup/memory"
CG = {}


def cgroup_enter():
    """Move the bench (and so every daemon and fio it starts) into a memory
    cgroup of its own: its page cache, Shmem included, is then what the
    targets cost, whatever else the machine does. None without cgroup v1."""
    if not os.path.exists(os.path.join(CG_ROOT, "memory.stat")):
        return None
    with open("/proc/self/cgroup") as f:
        old = [ln.split(":")[2].strip() for ln in f if ln.split(":")[1] == "memory"][0]
    cg = os.path.join(CG_ROOT, "spw-bench-fs-%d" % os.getpid())
    os.mkdir(cg)
    CG.update(path=cg, old=os.path.join(CG_ROOT, old.lstrip("/")))
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write("%d\n" % os.getpid())
    return cg


def cgroup_leave():
    if not CG:
        return
    try:
        with open(os.path.join(CG["path"], "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            with open(os.path.join(CG["old"], "cgroup.procs"), "w") as f:
                f.write(pid + "\n")
        os.rmdir(CG["path"])
    except OSError as e:
        log("could not remove %s: %s" % (CG["path"], e))


def page_cache():
    """Page cache (Shmem included) charged to the bench's cgroup, bytes, once
    it settles: a file unlinked or closed just before gives its pages back
    asynchronously (the daemon's forget, the kernel's cache drop)."""
    def now():
        with open(os.path.join(CG["path"], "memory.stat")) as f:
            return int(dict(ln.split() for ln in f)["total_cache"])
    prev = now()
    for _ in range(50):
        time.sleep(0.1)
        cur = now()
        if abs(cur - prev) < MiB:
            return cur
        prev = cur
    return prev


def metaops(tool, phase, d, n, timeout):
    out = run_tool([tool, phase, d, str(n)], timeout, "metaops %s in %s" % (phase, d))
    fields = out.split()
    if len(fields) != 4 or fields[0] != phase or int(fields[1]) != n:
        raise BenchError("metaops %s: unexpected output %r" % (phase, out))
    return float(fields[3])


# --------------------------------------------------------------------------
# Targets


def build_tools(tooldir, want_passthrough):
    tools = {}
    if want_passthrough:
        r = subprocess.run(
            [os.path.join(HERE, "build_passthrough.sh"), tooldir], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise BenchError("building passthrough_ll failed:\n" + r.stderr + r.stdout)
        tools["passthrough"] = os.path.join(tooldir, "passthrough_ll")
    mo = os.path.join(tooldir, "metaops")
    r = subprocess.run(
        ["cc", "-O2", "-Wall", "-o", mo, os.path.join(HERE, "metaops.c")],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise BenchError("building metaops failed:\n" + r.stderr)
    tools["metaops"] = mo
    return tools


def setup_targets(opts, tools, shmroot, mntroot, logdir):
    """Returns {target: directory to run the workloads in}."""
    dirs = {}
    if "tmpfs" in opts.targets:
        dirs["tmpfs"] = os.path.join(shmroot, "native")
        os.mkdir(dirs["tmpfs"])
    if "passthrough" in opts.targets:
        src = os.path.join(shmroot, "pt-src")
        mnt = os.path.join(mntroot, "passthrough")
        os.mkdir(src)
        os.mkdir(mnt)
        args = [tools["passthrough"], "-f", "-o", "source=" + src]
        if opts.passthrough_opts:
            args += ["-o", opts.passthrough_opts]
        args.append(mnt)
        start_daemon("passthrough_ll", args, mnt, os.path.join(logdir, "passthrough.log"))
        dirs["passthrough"] = mnt
    for t in ("spillway_off", "spillway"):
        if t not in opts.targets:
            continue
        hot = os.path.join(shmroot, "hot-" + t)
        mnt = os.path.join(mntroot, t)
        os.mkdir(hot)
        os.mkdir(mnt)
        o = "hot_dir=%s,hot_size=%s" % (hot, fmt_size(opts.hot_size))
        if t == "spillway_off":
            o += ",passthrough=off"
        if opts.spillway_opts:
            o += "," + opts.spillway_opts
        args = [opts.spillway_bin, "-f", "-o", o, mnt]
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in opts.spillway_env)
        log("%s: " % t + " ".join(opts.spillway_env + args))
        start_daemon(t, args, mnt, os.path.join(logdir, t + ".log"), env)
        dirs[t] = mnt
    return dirs


def one_round(opts, tools, dirs, results):
    """Every workload on every target once, targets interleaved per workload group."""
    io_timeout = max(120, opts.size // (20 * MiB))  # >= 20 MiB/s or it is a hang
    md_timeout = max(120, opts.files // 200)  # >= 200 ops/s
    for t in opts.targets:
        d = dirs[t]
        f = os.path.join(d, "bench.dat")
        if os.path.exists(f):
            os.unlink(f)
        drop_caches(3)
        ram0 = page_cache() if CG else None
        results[t]["write"].append(fio_job(f, "write", opts.size, io_timeout))
        st = os.stat(f)
        if st.st_size != opts.size:
            raise BenchError("%s: file is %d bytes after writing %d" % (t, st.st_size, opts.size))
        drop_caches(3)
        results[t]["read_cold"].append(fio_job(f, "read", opts.size, io_timeout, invalidate=1))
        results[t]["read_warm"].append(fio_job(f, "read", opts.size, io_timeout, invalidate=0))
        results[t]["rand_read"].append(fio_randread(f, opts.size, io_timeout))
        if CG:  # the kernel's copy is dropped at the last close (async)
            results[t]["ram"].append((page_cache() - ram0) / opts.size)
        os.unlink(f)
    for t in opts.targets:
        md = os.path.join(dirs[t], "meta")
        os.mkdir(md)
        mo = tools["metaops"]
        results[t]["create"].append(metaops(mo, "create", md, opts.files, md_timeout))
        results[t]["stat"].append(metaops(mo, "stat", md, opts.files, md_timeout))
        drop_caches(2)
        results[t]["stat_cold"].append(metaops(mo, "stat", md, opts.files, md_timeout))
        results[t]["unlink"].append(metaops(mo, "unlink", md, opts.files, md_timeout))
        left = os.listdir(md)
        if left:
            raise BenchError("%s: %d entries left after unlinking all" % (t, len(left)))
        os.rmdir(md)


# --------------------------------------------------------------------------
# Report


def report(opts, env, results, rounds):
    med = {
        t: {m: (statistics.median(results[t][m]) if results[t][m] else None) for m, *_ in METRICS}
        for t in TARGETS
        if t in results
    }

    def get(t, m):
        return med.get(t, {}).get(m)

    print()
    print("spillway foundation benchmark (issue 2)")
    env["load"] = "%s at start, %s at end (1/5/15 min)" % (env["load"], loadavg())
    keys = ("date", "kernel", "cpu", "memory", "load", "nice", "fio", "libfuse", "spillway", "tmpfs")
    for k in keys:
        if k in env:
            print("  %-9s %s" % (k + ":", env[k]))
    print(
        "  run:      file %s, 1 MiB psync, %d files; median of %d round(s) after %d warm-up"
        % (fmt_size(opts.size), opts.files, rounds, opts.warmup)
    )
    print()
    head = ["metric", "unit", "tmpfs", "passthru_ll", "spw pt=off", "spillway"]
    head += ["spw/tmpfs", "spw/pt_ll", "spw/pt=off", "target", "verdict"]
    rows = []
    verdicts = []
    for m, title, unit, goal in METRICS:
        s = get("spillway", m)
        goal_txt, verdict = "-", "-"
        if goal:
            base, need = goal
            goal_txt = ">= %.1fx %s" % (need, "tmpfs" if base == "tmpfs" else "pt_ll")
            b = get(base, m)
            if s is not None and b:
                verdict = "PASS" if s / b >= need else "MISS"
                verdicts.append((title, verdict, s / b, need))
        rows.append(
            [
                title,
                unit,
                fmt_val(get("tmpfs", m), unit),
                fmt_val(get("passthrough", m), unit),
                fmt_val(get("spillway_off", m), unit),
                fmt_val(s, unit),
                fmt_ratio(s, get("tmpfs", m)),
                fmt_ratio(s, get("passthrough", m)),
                fmt_ratio(s, get("spillway_off", m)),
                goal_txt,
                verdict,
            ]
        )
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    left = {0, 1, 9, 10}

    def line(r):
        return "  ".join(
            (c.ljust(widths[i]) if i in left else c.rjust(widths[i])) for i, c in enumerate(r)
        ).rstrip()

    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print()
    if verdicts:
        misses = [v for v in verdicts if v[1] == "MISS"]
        missed = "" if not misses else ", MISS: " + ", ".join(v[0] for v in misses)
        print(
            "targets: %d/%d PASS%s (informational; the bench does not fail on a miss)"
            % (len(verdicts) - len(misses), len(verdicts), missed)
        )
    if rounds > 1:
        print()
        print("spread (max-min)/median per target, %:")
        for m, title, unit, _ in METRICS:
            parts = []
            for t in TARGETS:
                xs = results.get(t, {}).get(m)
                if xs:
                    spread = 100 * (max(xs) - min(xs)) / statistics.median(xs)
                    parts.append("%s %.0f" % (TARGET_TITLES[t], spread))
            print("  %-24s %s" % (title, ", ".join(parts)))
    print(flush=True)
    return med


# --------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_fs.sh",
        description="tmpfs vs passthrough_ll vs spillway with and without passthrough"
    )
    p.add_argument(
        "--size", type=parse_size, help="file size for seq I/O (default 1G; quick 64M)"
    )
    p.add_argument(
        "--files", type=int, help="files for metadata rates (default 20000; quick 2000)"
    )
    p.add_argument(
        "--reps", type=int, help="measured rounds, median reported (default 3; quick 1)"
    )
    p.add_argument("--warmup", type=int, default=1, help="discarded warm-up rounds (default 1)")
    p.add_argument("--quick", action="store_true", help="smoke run: 64M, 2000 files, 1 round")
    p.add_argument(
        "--build",
        default=os.environ.get("SPILLWAY_BUILD", os.path.join(REPO, "build")),
        help="dir holding the spillway binary (default REPO/build or $SPILLWAY_BUILD)",
    )
    p.add_argument(
        "--targets", default=",".join(TARGETS),
        help="comma list of tmpfs,passthrough,spillway_off,spillway"
    )
    p.add_argument(
        "--hot-size", type=parse_size, help="spillway hot_size (default max(4G, 2*size))"
    )
    p.add_argument("--spillway-opts", default="", help="extra -o options for spillway")
    p.add_argument(
        "--spillway-env",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="environment for the spillway daemon only (repeatable), e.g. GLIBC_TUNABLES=...",
    )
    p.add_argument("--passthrough-opts", default="", help="extra -o options for passthrough_ll")
    p.add_argument("--tmpfs-root", default="/dev/shm", help="tmpfs to run on (default /dev/shm)")
    p.add_argument("--json", metavar="FILE", help="also write all samples and medians as JSON")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for the bench, its daemons and clients (e.g. -10 on a shared box)",
    )
    o = p.parse_args(argv)
    o.size = o.size or (64 * MiB if o.quick else GiB)
    o.files = o.files or (2000 if o.quick else 20000)
    o.reps = o.reps or (1 if o.quick else 3)
    if o.size % MiB:
        p.error("--size must be a multiple of 1M")
    if o.files <= 0 or o.reps <= 0 or o.warmup < 0:
        p.error("--files and --reps must be positive, --warmup non-negative")
    for kv in o.spillway_env:
        if "=" not in kv or kv.startswith("="):
            p.error("--spillway-env wants VAR=VALUE, got %r" % kv)
    o.targets = [t.strip() for t in o.targets.split(",") if t.strip()]
    for t in o.targets:
        if t not in TARGETS:
            p.error("unknown target %r (%s)" % (t, ", ".join(TARGETS)))
    o.targets = [t for t in TARGETS if t in o.targets]  # fixed interleave order
    o.hot_size = o.hot_size or max(4 * GiB, 2 * o.size)
    o.spillway_bin = os.path.join(os.path.abspath(o.build), "spillway")
    return o


def preflight(opts):
    if os.geteuid() != 0:
        raise BenchError("run as root (drop_caches, FUSE mounts)")
    fuse_targets = [t for t in opts.targets if t != "tmpfs"]
    if fuse_targets and not os.path.exists("/dev/fuse"):
        raise BenchError("/dev/fuse is missing")
    for tool in ("fio", "cc", "fusermount3", "pkg-config"):
        if not shutil.which(tool):
            raise BenchError("%s not found in PATH" % tool)
    if ("spillway" in opts.targets or "spillway_off" in opts.targets) and \
            not os.access(opts.spillway_bin, os.X_OK):
        raise BenchError(
            "%s not found; build it (cmake -S %s -B BUILD && cmake --build BUILD) and pass"
            " --build BUILD, or leave spillway out with --targets tmpfs,passthrough"
            % (opts.spillway_bin, REPO)
        )
    nofile = raise_nofile()
    if "passthrough" in opts.targets and opts.files > nofile - 1000:
        # passthrough_ll holds an O_PATH fd for every inode the kernel knows.
        n = max(1000, (nofile - 1000) // 1000 * 1000)
        log(
            "RLIMIT_NOFILE is %d and passthrough_ll keeps one fd per inode:"
            " using %d files instead of %d" % (nofile, n, opts.files)
        )
        opts.files = n
    st = os.statvfs(opts.tmpfs_root)
    free = st.f_bavail * st.f_frsize
    # one data file per target at a time, plus a page-cache copy for FUSE targets
    need = opts.size * (len(opts.targets) + 1) + 256 * MiB
    if free < need:
        raise BenchError(
            "%s has %d MiB free, need ~%d MiB for --size %s"
            % (opts.tmpfs_root, free // MiB, need // MiB, fmt_size(opts.size))
        )


def main(argv):
    opts = parse_args(argv)
    results = {t: {m: [] for m, *_ in METRICS} for t in opts.targets}

    def body():
        preflight(opts)
        if opts.nice:
            os.nice(opts.nice)  # inherited by the daemons, fio and metaops
        tooldir = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-tools-"))
        mntroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-mnt-"))
        shmroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-", dir=opts.tmpfs_root))
        if not cgroup_enter():
            log("no cgroup v1 memory controller: the RAM row is left out")
        tools = build_tools(tooldir, "passthrough" in opts.targets)
        env = environment(opts)
        dirs = setup_targets(opts, tools, shmroot, mntroot, tooldir)
        total = opts.warmup + opts.reps
        for i in range(total):
            warm = i < opts.warmup
            log("round %d/%d%s" % (i + 1, total, " (warm-up, discarded)" if warm else ""))
            sink = {t: {m: [] for m, *_ in METRICS} for t in opts.targets} if warm else results
            one_round(opts, tools, dirs, sink)
        for name, proc, _, _ in CLEANUP.daemons:
            if proc.poll() is not None:
                raise BenchError("%s (pid %d) died during the run" % (name, proc.pid))
        med = report(opts, env, results, opts.reps)
        if opts.json:
            with open(opts.json, "w") as f:
                doc = {"env": env, "size": opts.size, "files": opts.files}
                doc.update(samples=results, median=med)
                json.dump(doc, f, indent=1)

    return run_guarded(body, after_cleanup=cgroup_leave)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
