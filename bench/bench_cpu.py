#!/usr/bin/env python3
"""spillway CPU per GiB (issue 24): what the daemon burns per byte moved.

One run mounts BUILD/spillway (nvme= a cold directory on --cold, hot tier in
/dev/shm; or with --s3, a local s3rver as the only cold tier) and, --reps
times, runs three steps on --files files of --size bytes in all:

  write    dd bs=1M of each file into the mount (hot tier only, no spill);
  spill    setfattr -n user.spillway.evict on each file (synchronous);
  read     cat of each file with the page cache dropped (cold: restore);

and for each prints the daemon's CPU seconds per GiB (utime + stime of all
its threads, io_uring workers included, from /proc/PID/stat), split into
user and sys, and the client's (dd, cat) from its rusage. Beside them, the
same I/O done by fio on the same directories, fio's own CPU per GiB (the job's
usr_cpu + sys_cpu times its runtime: fio's start-up is left out):

  write    fio write bs=1M psync of the same bytes into a file on the
           hot tier's tmpfs (what a hot write must at least cost: one copy);
  spill    fio write bs=1M O_DIRECT io_uring iodepth=8 of the same bytes
           into the cold directory (a spill that costs nothing but the
           write itself); with --s3: `aws s3 cp` of a file of the same
           bytes from the tmpfs up to the same server (its CPU: rusage,
           less that of the same cp of a 4 KiB object: its start-up);
  read     fio read bs=1M O_DIRECT io_uring iodepth=8 of that file (the
           cold read without a FUSE hop); with --s3: `aws s3 cp` down
           into the tmpfs.

Medians over --reps runs (the first run is a warm-up, not counted, unless
--reps is 1); every file read back is checked (sha256). CPU seconds are far
less sensitive to a noisy machine than wall time, but not immune (cache
misses, the hypervisor): the per-run figures are printed too. --perf DIR
records `perf record -g` of the daemon (and of fio) during each step of the
last run into DIR/<step>-<who>.data.

Before and after: --build A,B mounts both builds side by side (each its own
cold and hot directories) and alternates them in one run (A then B, then B
then A, ...: the machine's drift falls on both alike), printing each
build's table and the ratio B / A of the daemon's CPU per GiB. Run as root:

  python3 bench/bench_cpu.py --build build [--size 1G] [--reps 3] [--cold /var/tmp]
  python3 bench/bench_cpu.py --build ../main/build,build --reps 5
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
GiB = 1 << 30
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from lib.tier import seg_layout  # noqa: E402  (the tests' segment footer parser)
HZ = os.sysconf("SC_CLK_TCK")
BUCKET = "bcpu"


def parse_size(v):
    v = v.strip()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB}.get(v[-1:].upper(), 1)
    return int(float(v[:-1] if mult > 1 else v) * mult)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def proc_cpu(pid):
    """(user, sys) seconds of every thread of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / HZ, int(fields[12]) / HZ


def run_child(args, **kw):
    """Run args; return (user, sys) CPU seconds of the child (and its children)."""
    p = subprocess.Popen(args, **kw)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d" % (" ".join(args[:3]), p.returncode))
    return ru.ru_utime, ru.ru_stime


class Perf:
    """perf record -g of one pid while a step runs (None: off)."""

    def __init__(self, outdir, name, pid):
        self.p = None
        if outdir:
            self.p = subprocess.Popen(
                ["perf", "record", "-g", "-q", "-o", os.path.join(outdir, name + ".data"),
                 "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)

    def stop(self):
        if self.p:
            self.p.send_signal(signal.SIGINT)
            self.p.wait(60)


class S3rver:
    def __init__(self, root):
        self.dir = tempfile.mkdtemp(prefix="bcpu-s3-", dir=root)
        self.port = 19000 + os.getpid() % 1000
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen(
            ["node", os.path.join(REPO, "tests", "s3", "s3rver.js"), "--port", str(self.port),
             "--dir", self.dir, "--bucket", BUCKET],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import socket
        t0 = time.time()
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.time() - t0 > 20 or self.proc.poll() is not None:
                    raise RuntimeError("s3rver did not start")
                time.sleep(0.1)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Mount:
    def __init__(self, binary, cold_root, opts, s3=None, hot_root="/dev/shm"):
        self.hot = tempfile.mkdtemp(prefix="bcpu-hot-", dir=hot_root)
        self.cold = tempfile.mkdtemp(prefix="bcpu-cold-", dir=cold_root)
        self.mnt = tempfile.mkdtemp(prefix="bcpu-mnt-")
        self.log = tempfile.mktemp(prefix="bcpu-log-")
        if s3:
            cold = "s3=s3://%s/spw,s3_endpoint=%s,s3_path_style,state_dir=%s" % (
                BUCKET, s3.endpoint, os.path.join(self.cold, "state"))
        else:
            cold = "nvme=" + self.cold
        o = "hot_dir=%s,hot_size=6G,%s,chunk_size=4M" % (self.hot, cold) + (
            "," + opts if opts else "")
        env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        self.proc = subprocess.Popen([binary, "-f", "-o", o, self.mnt], env=env,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        t0 = time.time()
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() - t0 > 20:
                msg = open(self.log).read()[-2000:]
                self.close()
                raise RuntimeError("mount failed: " + msg)
            time.sleep(0.05)
        self.pid = self.proc.pid

    def cpu(self):
        return proc_cpu(self.pid)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for d in (self.hot, self.cold, self.mnt):
            shutil.rmtree(d, ignore_errors=True)
        os.unlink(self.log)


def make_source(path, size):
    """A file of size incompressible bytes (1 MiB pattern varied per MiB)."""
    blk = os.urandom(MiB)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(size // MiB):
            b = i.to_bytes(8, "little") + blk[8:]
            f.write(b)
            h.update(b)
    return h.hexdigest()


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def fio(args, perfdir=None, name=None):
    cmd = ["fio", "--name=b", "--bs=1M", "--output-format=json"] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    pr = Perf(perfdir, name, p.pid) if perfdir else None
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if pr:
        pr.stop()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("fio failed: %s" % out[:300])
    # the job's own CPU (usr_cpu and sys_cpu are percent of its runtime), not
    # fio's start-up and reporting, which cost more than a 1 GiB job itself
    j = json.loads(out[out.index(b"{"):])["jobs"][0]
    return (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * j["job_runtime"] / 1000.0


def aws(args, s3):
    """CPU of `aws s3 ARGS` less that of the same command on a 4 KiB object
    (the CLI's start-up, ~1 CPU-s, which a 1 GiB copy would otherwise carry)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_DEFAULT_REGION="us-east-1")

    def cpu(a):
        u, s = run_child(["aws", "--endpoint-url", s3.endpoint, "s3"] + a, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return u + s

    tiny = "/dev/shm/bcpu-tiny-%d" % os.getpid()
    if args[1].startswith("s3://"):  # down: the same for a tiny object
        with open(tiny, "wb") as f:
            f.write(b"x" * 4096)
        cpu(["cp", tiny, "s3://%s/tiny" % BUCKET])
        base = cpu(["cp", "s3://%s/tiny" % BUCKET, tiny])
    else:
        with open(tiny, "wb") as f:
            f.write(b"x" * 4096)
        base = cpu(["cp", tiny, "s3://%s/tiny" % BUCKET])
    os.unlink(tiny)
    return max(0.0, cpu(args) - base)


def seg_names(d):
    return {n for n in os.listdir(d) if n.startswith("seg-") and n.endswith(".spw")}


def one_run(a, m, src, digest, srv, perfdir):
    """One round of the three steps; {step: (daemon user, daemon sys, client, fio)} per GiB."""
    gib = a.size / GiB
    per = a.size // a.files
    names = [os.path.join(m.mnt, "f%d" % i) for i in range(a.files)]
    res = {}

    # write: dd of the source (its parts) into the mount
    drop_caches()
    c0 = m.cpu()
    pr = Perf(perfdir, "write-daemon", m.pid)
    cl = 0.0
    for i, n in enumerate(names):
        u, s = run_child(["dd", "if=" + src, "of=" + n, "bs=1M", "count=%d" % (per // MiB),
                          "skip=%d" % (i * per // MiB), "status=none"])
        cl += u + s
    pr.stop()
    c1 = m.cpu()
    fpath = os.path.join(m.hot, "..", os.path.basename(m.hot) + "-fio")
    fcpu = fio(["--filename=" + fpath, "--rw=write", "--size=%d" % a.size, "--ioengine=psync"],
               perfdir, "write-fio")
    os.unlink(fpath)
    res["write"] = (c1[0] - c0[0], c1[1] - c0[1], cl, fcpu)

    # spill: evict each file (synchronous)
    segs0 = seg_names(m.cold) if not srv else set()
    c0 = m.cpu()
    pr = Perf(perfdir, "spill-daemon", m.pid)
    t0 = time.monotonic()
    for n in names:
        os.setxattr(n, "user.spillway.evict", b"1")
    pr.stop()
    c1 = m.cpu()
    st = json.loads(os.getxattr(m.mnt, "user.spillway.stats"))
    if srv:
        fpath = os.path.join("/dev/shm", "bcpu-src-%d" % os.getpid())
        shutil.copyfile(src, fpath)
        fcpu = aws(["cp", fpath, "s3://%s/awscpu" % BUCKET], srv)
        os.unlink(fpath)
    else:
        fpath = os.path.join(m.cold, "fio-spill")
        fcpu = fio(["--filename=" + fpath, "--rw=write", "--size=%d" % a.size, "--direct=1",
                    "--ioengine=io_uring", "--iodepth=8", "--end_fsync=1"], perfdir, "spill-fio")
    res["spill"] = (c1[0] - c0[0], c1[1] - c0[1], 0.0, fcpu)
    lay = None if srv else seg_layout(m.cold, seg_names(m.cold) - segs0 - {"fio-spill"})
    if lay and not lay["data"]:  # a small hot_size: the write went around RAM already
        print("segments of this spill: none (the files were spilled as they were written)",
              file=sys.stderr)
    elif lay:
        print("segments of this spill (format v%s): %d bytes of data, padding %.3f %%, "
              "maps %.3f %%, header+footer %.3f %%" % (
                  "/".join(str(v) for v in sorted(lay["versions"])), lay["data"],
                  100.0 * lay["padding"] / lay["data"], 100.0 * lay["maps"] / lay["data"],
                  100.0 * lay["hdr_foot"] / lay["data"]), file=sys.stderr)
    hot = st.get("hot", {})

    # read: cat each (cold) file, caches dropped
    drop_caches()
    c0 = m.cpu()
    pr = Perf(perfdir, "read-daemon", m.pid)
    cl = 0.0
    h = hashlib.sha256()
    for n in names:
        with tempfile.TemporaryFile() as out:
            u, s = run_child(["cat", n], stdout=out)
        cl += u + s
    pr.stop()
    c1 = m.cpu()
    drop_caches()
    if srv:
        fpath = os.path.join("/dev/shm", "bcpu-dl-%d" % os.getpid())
        fcpu = aws(["cp", "s3://%s/awscpu" % BUCKET, fpath], srv)
        os.unlink(fpath)
    else:
        fcpu = fio(["--filename=" + fpath, "--rw=read", "--size=%d" % a.size, "--direct=1",
                    "--ioengine=io_uring", "--iodepth=8"], perfdir, "read-fio")
        os.unlink(fpath)
    res["read"] = (c1[0] - c0[0], c1[1] - c0[1], cl, fcpu)

    # check every byte, then remove the files (outside the measured steps)
    whole = hashlib.sha256()
    for n in names:
        with open(n, "rb") as f:
            while True:
                b = f.read(4 * MiB)
                if not b:
                    break
                whole.update(b)
    if whole.hexdigest() != digest:
        raise RuntimeError("read back differs from what was written")
    for n in names:
        os.unlink(n)
    return {k: tuple(x / gib for x in v) for k, v in res.items()}


def table(runs, other):
    """The medians of runs ({step: per-GiB tuple}) as a table; {step: figures}."""
    print("| step | daemon (user + sys) | client | %s, same I/O |" % other)
    print("|---|---|---|---|")
    out = {}
    for step in ("write", "spill", "read"):
        med = [statistics.median(r[step][i] for r in runs) for i in range(4)]
        tot = statistics.median(r[step][0] + r[step][1] for r in runs)
        out[step] = {"daemon": tot, "user": med[0], "sys": med[1], "client": med[2],
                     other: med[3]}
        print("| %s | %.2f (%.2f + %.2f) | %s | %.2f |" % (
            step, tot, med[0], med[1], "%.2f" % med[2] if step != "spill" else "-", med[3]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build",
                    help="build dir, or two (A,B): alternated in one run, B / A printed")
    ap.add_argument("--size", type=parse_size, default=parse_size("1G"))
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cold", default="/var/tmp", help="filesystem of the cold directory")
    ap.add_argument("--opts", default="", help="extra mount options")
    ap.add_argument("--hot-root", default="/dev/shm",
                    help="tmpfs for the hot tier (and fio's write), e.g. one mounted huge=within_size")
    ap.add_argument("--s3", action="store_true", help="s3rver as the only cold tier, aws cli beside")
    ap.add_argument("--perf", default=None, help="record perf -g of the last run into this dir")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.size % (a.files * MiB):
        ap.error("--size must be a multiple of --files MiB")
    builds = [b for b in a.build.split(",") if b]
    if not 1 <= len(builds) <= 2:
        ap.error("--build takes one build dir or two (A,B)")
    src = os.path.join(a.cold, "bcpu-src-%d" % os.getpid())
    srv = None
    mounts = []
    runs = {b: [] for b in builds}
    try:
        digest = make_source(src, a.size)
        if a.s3:
            srv = S3rver("/dev/shm")
        for b in builds:
            mounts.append(Mount(os.path.join(b, "spillway"), a.cold, a.opts, srv, a.hot_root))
        total = a.reps + (1 if a.reps > 1 else 0)
        for r in range(total):
            last = r == total - 1
            order = list(range(len(builds)))
            if r % 2:
                order.reverse()
            for i in order:
                b, m = builds[i], mounts[i]
                perf = None
                if a.perf and last:
                    perf = os.path.join(a.perf, "b%d" % i) if len(builds) > 1 else a.perf
                    os.makedirs(perf, exist_ok=True)
                res = one_run(a, m, src, digest, srv, perf)
                tag = ("[%s] " % b) if len(builds) > 1 else ""
                if a.reps > 1 and r == 0:
                    print("%swarm-up: %s" % (tag, json.dumps(
                        {k: [round(x, 3) for x in v] for k, v in res.items()})), file=sys.stderr)
                    continue
                runs[b].append(res)
                print("%srun %d: %s" % (tag, len(runs[b]), json.dumps(
                    {k: [round(x, 3) for x in v] for k, v in res.items()})), file=sys.stderr)
    finally:
        for m in mounts:
            m.close()
        if srv:
            srv.close()
        if os.path.exists(src):
            os.unlink(src)
    other = "fio (write) / aws cli less its start-up" if a.s3 else "fio"
    out = {}
    for b in builds:
        print("CPU seconds per GiB, %s in %d files, cold tier %s, median of %d run(s)%s" % (
            "%d MiB" % (a.size // MiB), a.files, "s3rver" if a.s3 else a.cold, len(runs[b]),
            (", build " + b) if len(builds) > 1 else ""))
        out[b] = table(runs[b], other)
    if len(builds) == 2:
        x, y = builds
        print("daemon CPU per GiB, %s / %s (medians of the same run, alternated)" % (y, x))
        print("| step | %s | %s | ratio |" % (x, y))
        print("|---|---|---|---|")
        for step in ("write", "spill", "read"):
            dx, dy = out[x][step]["daemon"], out[y][step]["daemon"]
            print("| %s | %.2f | %.2f | %.2fx |" % (step, dx, dy, dy / dx if dx else 0))
    if a.json:
        print(json.dumps(out if len(builds) > 1 else out[builds[0]]))


if __name__ == "__main__":
    main()
