#!/usr/bin/env python3
"""spillway S3 tier benchmark (issue 4): spill to / restore from S3 vs `aws s3 cp`.

One local S3 server (tests/s3/s3rver.js, objects on a tmpfs by default) serves
both sides, so the figures differ only in the client:
  spillway  BUILD/spillway with s3= as its only cold tier:
            spill    = `setxattr user.spillway.evict` of a hot file of --size
                       bytes (synchronous: returns once the segment's
                       multipart upload completed), timed in-process;
            restore  = open + sequential read of that (now cold) file with
                       the page cache dropped (restore=open: io_workers ranged
                       GETs in flight), timed in-process;
            stream   = writing --size bytes into a second mount whose hot tier
                       is a quarter of that (the evictor spills while the writer
                       waits for room); informational.
  aws       `aws s3 cp` of the same bytes up and down, with the same part size
            (multipart_chunksize = multipart_threshold = --part-size) and
            max_concurrent_requests = --io-workers, set with `aws configure
            set` in a temporary AWS_CONFIG_FILE; credentials from the
            environment; --endpoint-url to the local server. Timed two ways:
            wall clock of the child process ("aws cp"), and transfer only
            ("aws xfer": from the first request to the last line of its
            --debug log, i.e. without the CLI's ~1-10 s of start-up).

A warm-up round is discarded, then --reps rounds each run spill, aws up,
restore, aws down (, stream) in turn; medians are reported with the ratios
spillway/aws (target >= 1.0x against aws's transfer-only time). Every byte is
checked (sha256) after each timed transfer, outside the timing. Misses are
informational: the exit status is non-zero only when the harness fails.
Everything it starts (s3rver, daemons, mounts, temp dirs) is removed on every
exit path, including SIGINT/SIGTERM/SIGHUP. Run as root. Python 3 stdlib only.
"""

import argparse
import datetime
import io
import hashlib
import json
import os
import platform
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
import benchlib  # noqa: E402
from benchlib import (  # noqa: E402
    CLEANUP,
    REPO,
    BenchError,
    cmd_first_line,
    fmt_ratio,
    fmt_size,
    fmt_val,
    loadavg,
    log,
    parse_size,
    start_daemon,
)

MiB = 1 << 20
S3RVER_JS = os.path.join(REPO, "tests", "s3", "s3rver.js")
BUCKET = "bench"
KEY_ID, SECRET = "S3RVER", "S3RVER"
READY_TIMEOUT = 30.0

# metric -> (title, aws metric compared with, has a target)
METRICS = [
    ("spill", "spill to S3 (evict)", "up", True),
    ("restore", "restore from S3 (cold read)", "down", True),
    ("stream", "write via hot tier of size/4", "up", False),
]


# --------------------------------------------------------------------------
# the S3 server


class S3rver:
    """tests/s3/s3rver.js on a free port; stdin is a pipe (its lifeline)."""

    def __init__(self, root, logpath):
        self.dir = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-s3-", dir=root))
        self.log = logpath
        self.proc = None
        self.port = None

    def start(self):
        argv = ["node", S3RVER_JS, "--dir", self.dir, "--port", "0", "--bucket", BUCKET]
        argv += ["--access-key", KEY_ID, "--secret-key", SECRET]
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf
            )
        deadline = time.monotonic() + READY_TIMEOUT
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError("s3rver not ready within %.0fs" % READY_TIMEOUT)
            r, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if r:
                b = os.read(self.proc.stdout.fileno(), 4096)
                if not b:
                    raise BenchError("s3rver exited with %s: %s" % (self.proc.wait(), self.tail()))
                buf += b
        m = re.match(rb"ready (\d+)", buf)
        if not m:
            raise BenchError("s3rver said %r" % buf)
        self.port = int(m.group(1))
        return self

    def tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None


# --------------------------------------------------------------------------
# helpers


def guarded(fn, timeout, what):
    """Run fn() in a thread; on timeout kill the daemons (aborting the FUSE
    connection unblocks the call) and fail. Returns fn's value."""
    box = {}

    def run():
        try:
            box["v"] = fn()
        except BaseException as e:  # noqa: B902 - re-raised in the caller
            box["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        CLEANUP.kill_daemons()
        t.join(10)
        raise BenchError("%s: timed out after %ds" % (what, timeout))
    if "e" in box:
        e = box["e"]
        raise BenchError("%s: %s" % (what, e)) if isinstance(e, OSError) else e
    return box.get("v")


def make_source(path, size):
    """size random bytes at path; returns their sha256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(left, 4 * MiB))
            h.update(b)
            f.write(b)
            left -= len(b)
    return h.hexdigest()


def sha_of(path, bs=4 * MiB):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                return h.hexdigest()
            h.update(b)


def copy_into(src, dst, bs=4 * MiB):
    buf = bytearray(bs)
    mv = memoryview(buf)
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        while True:
            n = fi.readinto(buf)
            if not n:
                break
            off = 0
            while off < n:
                off += fo.write(mv[off:n])


def read_all(path, bs=4 * MiB):
    """Read path sequentially with the page cache dropped; returns bytes read."""
    buf = bytearray(bs)
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while True:
            n = os.readv(fd, [buf])
            if not n:
                return total
            total += n
    finally:
        os.close(fd)


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def state(path):
    s = os.getxattr(path, "user.spillway.state").decode()
    return {k: int(v) for k, v in (f.split("=") for f in s.split())}


# --------------------------------------------------------------------------
# the two clients


class Aws:
    def __init__(self, opts, server, workdir):
        self.bin = opts.aws
        self.server = server
        self.timeout = opts.timeout
        cfg = os.path.join(workdir, "aws-config")
        creds = os.path.join(workdir, "aws-credentials")
        open(creds, "w").close()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env.update(
            AWS_CONFIG_FILE=cfg,
            AWS_SHARED_CREDENTIALS_FILE=creds,
            AWS_ACCESS_KEY_ID=KEY_ID,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_EC2_METADATA_DISABLED="true",
            AWS_PAGER="",
        )
        part = "%dMB" % (opts.part_size // MiB)
        for k, v in (
            ("default.region", "us-east-1"),
            ("default.s3.multipart_chunksize", part),
            ("default.s3.multipart_threshold", part),
            ("default.s3.max_concurrent_requests", str(opts.io_workers)),
            ("default.s3.addressing_style", "path"),
        ):
            self.run(["configure", "set", k, v], "aws configure set %s" % k)
        with open(cfg) as f:
            self.config = f.read()

    def run(self, args, what, debug=False):
        """Run aws; returns (wall seconds, transfer seconds or None)."""
        argv = [self.bin] + (["--debug"] if debug else []) + args
        t0 = time.monotonic()
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=self.timeout
        )
        dt = time.monotonic() - t0
        if proc.returncode != 0:
            raise BenchError(
                "%s: exit %d: %s" % (what, proc.returncode, (proc.stderr or proc.stdout)[-2000:])
            )
        return dt, (debug_span(proc.stderr, what) if debug else None)

    def s3(self, *args):
        return ["--endpoint-url", self.server.endpoint] + list(args)

    def up(self, src, key):
        url = "s3://%s/%s" % (BUCKET, key)
        cmd = self.s3("s3", "cp", "--no-progress", "--only-show-errors", src, url)
        return self.run(cmd, "aws s3 cp up", debug=True)

    def down(self, key, dst):
        url = "s3://%s/%s" % (BUCKET, key)
        cmd = self.s3("s3", "cp", "--no-progress", "--only-show-errors", url, dst)
        return self.run(cmd, "aws s3 cp down", debug=True)

    def rm(self, key):
        url = "s3://%s/%s" % (BUCKET, key)
        self.run(self.s3("s3", "rm", "--only-show-errors", url), "aws s3 rm")


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - ")


def debug_span(log_text, what):
    """Seconds from the first request ("Making request for") to the last
    timestamped line of an `aws --debug` log."""
    first = last = None
    for ln in io.StringIO(log_text):
        m = _STAMP.match(ln)
        if not m:
            continue
        if first is None and "Making request for" in ln:
            first = m.group(1)
        last = m.group(1)
    if first is None or last is None:
        raise BenchError("%s: no request found in its --debug log" % what)

    def secs(stamp):
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()

    return max(secs(last) - secs(first), 0.001)


def mount_spillway(opts, server, name, shmroot, mntroot, logdir, hot_size, extra):
    mnt = os.path.join(mntroot, name)
    os.mkdir(mnt)
    hot = os.path.join(shmroot, name + "-hot")
    o = [
        "hot_dir=" + hot,
        "hot_size=%d" % hot_size,
        "s3=s3://%s/spw-%s" % (BUCKET, name),
        "s3_endpoint=" + server.endpoint,
        "s3_path_style",
        "state_dir=%s" % os.path.join(logdir, name + "-state"),
        "s3_part_size=%d" % opts.part_size,
        "io_workers=%d" % opts.io_workers,
    ] + extra
    if opts.spillway_opts:
        o.append(opts.spillway_opts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET)
    args = [opts.spillway_bin, "-f", "-o", ",".join(o), mnt]
    start_daemon("spillway-" + name, args, mnt, os.path.join(logdir, name + ".log"), env=env)
    return mnt


# --------------------------------------------------------------------------
# one round


def one_round(opts, ctx, rnd, res):
    size, src, sha = opts.size, ctx["src"], ctx["sha"]
    tmo = opts.timeout
    aws, mnt = ctx["aws"], ctx["mnt"]

    # spillway: spill (evict a hot file)
    f = os.path.join(mnt, "r%d" % rnd)
    guarded(lambda: copy_into(src, f), tmo, "writing %s" % f)
    s0 = stats(mnt)
    t0 = time.monotonic()
    guarded(lambda: os.setxattr(f, "user.spillway.evict", b"1"), tmo, "evict of %s" % f)
    dt = time.monotonic() - t0
    st, s1 = state(f), stats(mnt)
    if st["hot"] or not st["cold"]:
        raise BenchError("after evict %s is not cold: %s" % (f, st))
    if s1["spilled"]["bytes"] - s0["spilled"]["bytes"] < size:
        raise BenchError("evict spilled %d bytes, expected %d" % (
            s1["spilled"]["bytes"] - s0["spilled"]["bytes"], size))
    res["spill"].append(size / MiB / dt)

    # aws up
    key = "aws/r%d" % rnd
    wall, xfer = aws.up(src, key)
    res["up"].append(size / MiB / wall)
    res["up_xfer"].append(size / MiB / xfer)
    res["startup"].append(wall - xfer)

    # spillway: restore (read the cold file)
    t0 = time.monotonic()
    n = guarded(lambda: read_all(f), tmo, "reading %s" % f)
    dt = time.monotonic() - t0
    if n != size:
        raise BenchError("read %d bytes of %s, expected %d" % (n, f, size))
    s2 = stats(mnt)
    if s2["restored"]["bytes"] - s1["restored"]["bytes"] < size:
        raise BenchError("reading restored %d bytes, expected %d" % (
            s2["restored"]["bytes"] - s1["restored"]["bytes"], size))
    res["restore"].append(size / MiB / dt)
    if guarded(lambda: sha_of(f), tmo, "checking %s" % f) != sha:
        raise BenchError("%s read back differs from the source" % f)
    os.unlink(f)

    # aws down
    dst = os.path.join(ctx["shm"], "aws-down")
    wall, xfer = aws.down(key, dst)
    res["down"].append(size / MiB / wall)
    res["down_xfer"].append(size / MiB / xfer)
    res["startup"].append(wall - xfer)
    if sha_of(dst) != sha:
        raise BenchError("aws download differs from the source")
    os.unlink(dst)
    aws.rm(key)

    # spillway: stream through a small hot tier
    if ctx.get("smnt"):
        g = os.path.join(ctx["smnt"], "s%d" % rnd)
        t0 = time.monotonic()
        guarded(lambda: copy_into(src, g), tmo, "writing %s" % g)
        dt = time.monotonic() - t0
        res["stream"].append(size / MiB / dt)
        if guarded(lambda: sha_of(g), tmo, "checking %s" % g) != sha:
            raise BenchError("%s read back differs from the source" % g)
        os.unlink(g)


# --------------------------------------------------------------------------
# report


def environment(opts):
    cpu = benchlib.cpu_model()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "cpu": "%s, %d cpus" % (cpu, os.cpu_count() or 0),
        "load": loadavg(),
        "aws": cmd_first_line([opts.aws, "--version"]) + " (" + opts.aws + ")",
        "node": cmd_first_line(["node", "--version"]),
        "server": "s3rver (tests/s3), objects under " + opts.server_root,
        "spillway": "%s (git %s)" % (opts.spillway_bin, benchlib.git_rev()),
    }


def report(opts, env, res):
    med = {k: (statistics.median(v) if v else None) for k, v in res.items()}
    startup = med["startup"] or 0.0
    print()
    print("spillway S3 benchmark (issue 4)")
    env["load"] = "%s at start, %s at end (1/5/15 min)" % (env["load"], loadavg())
    for k in ("date", "kernel", "cpu", "load", "aws", "node", "server", "spillway"):
        print("  %-9s %s" % (k + ":", env[k]))
    print(
        "  run:      %s per transfer, part size %s, %d connections; median of %d round(s) "
        "after %d warm-up" % (fmt_size(opts.size), fmt_size(opts.part_size), opts.io_workers,
                              opts.reps, opts.warmup)
    )
    print("  aws start-up and shut-down (wall - transfer): %.2f s median" % startup)
    print()
    head = ["MiB/s", "spillway", "aws cp", "aws xfer", "spw/aws", "spw/xfer", "target", "verdict"]
    rows, verdicts = [], []
    for m, title, base, has_target in METRICS:
        s = med.get(m)
        if s is None:
            continue
        a, ax = med[base], med[base + "_xfer"]
        goal, verdict = "-", "-"
        if has_target:
            goal = ">= 1.0x xfer"
            if ax:
                verdict = "PASS" if s / ax >= 1.0 else "MISS"
                verdicts.append((title, verdict))
        rows.append([title, fmt_val(s, "MiB/s"), fmt_val(a, "MiB/s"), fmt_val(ax, "MiB/s"),
                     fmt_ratio(s, a), fmt_ratio(s, ax), goal, verdict])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "  ".join(
            c.ljust(widths[i]) if i in (0, 6, 7) else c.rjust(widths[i]) for i, c in enumerate(r)
        ).rstrip()

    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print()
    print("  aws cp = wall time of `aws s3 cp` (incl. CLI start-up); aws xfer = first request")
    print("  to last line of its --debug log; the stream row compares with aws up, no target.")
    if verdicts:
        misses = [t for t, v in verdicts if v == "MISS"]
        print(
            "targets: %d/%d PASS%s (informational; the bench does not fail on a miss)"
            % (len(verdicts) - len(misses), len(verdicts),
               "" if not misses else ", MISS: " + ", ".join(misses))
        )
    if opts.reps > 1:
        print()
        print("spread (max-min)/median, %:")
        for k in ("spill", "up", "up_xfer", "restore", "down", "down_xfer", "stream", "startup"):
            xs = res.get(k)
            if xs:
                print("  %-10s %.0f   (%s)" % (k, 100 * (max(xs) - min(xs)) / statistics.median(xs),
                                              ", ".join("%.1f" % x for x in xs)))
    print(flush=True)
    return med


# --------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_s3.sh", description="spillway S3 spill/restore vs aws s3 cp (issue 4)"
    )
    p.add_argument("--size", type=parse_size, help="bytes per transfer (default 512M; quick 64M)")
    p.add_argument("--reps", type=int, help="measured rounds (default 3; quick 1)")
    p.add_argument("--warmup", type=int, help="discarded warm-up rounds (default 1; quick 0)")
    p.add_argument("--quick", action="store_true", help="smoke run: 64M, 1 round, no warm-up")
    p.add_argument(
        "--build",
        default=os.environ.get("SPILLWAY_BUILD", os.path.join(REPO, "build")),
        help="dir holding the spillway binary (default REPO/build or $SPILLWAY_BUILD)",
    )
    p.add_argument("--part-size", type=parse_size, default=16 * MiB,
                   help="s3_part_size and aws multipart_chunksize (default 16M)")
    p.add_argument("--io-workers", type=int, default=8,
                   help="spillway io_workers and aws max_concurrent_requests (default 8)")
    p.add_argument("--no-stream", action="store_true", help="leave out the 'stream' row")
    p.add_argument("--spillway-opts", default="", help="extra -o options for spillway")
    p.add_argument("--aws", default=shutil.which("aws") or "aws", help="aws CLI to compare with")
    p.add_argument("--server-root", default="/dev/shm",
                   help="where s3rver keeps objects (default /dev/shm)")
    p.add_argument("--tmpfs-root", default="/dev/shm", help="hot tiers and source files")
    p.add_argument("--timeout", type=int, help="seconds per operation (default 60 + 1 s/MiB)")
    p.add_argument("--json", metavar="FILE", help="also write the samples and medians as JSON")
    o = p.parse_args(argv)
    o.size = o.size or (64 * MiB if o.quick else 512 * MiB)
    o.reps = o.reps or (1 if o.quick else 3)
    if o.warmup is None:
        o.warmup = 0 if o.quick else 1
    if o.size % MiB or o.size < 16 * MiB:
        p.error("--size must be a multiple of 1M, at least 16M")
    if o.part_size % MiB or not 5 * MiB <= o.part_size <= 5 << 30:
        p.error("--part-size must be whole MiB between 5M and 5G")
    if o.reps <= 0 or o.warmup < 0 or o.io_workers <= 0:
        p.error("--reps and --io-workers must be positive, --warmup non-negative")
    o.timeout = o.timeout or 60 + o.size // MiB
    o.spillway_bin = os.path.join(os.path.abspath(o.build), "spillway")
    return o


def preflight(opts):
    if os.geteuid() != 0:
        raise BenchError("run as root (FUSE mounts)")
    if not os.path.exists("/dev/fuse"):
        raise BenchError("/dev/fuse is missing")
    if not os.access(opts.spillway_bin, os.X_OK):
        raise BenchError("%s not found; build it and pass --build BUILD" % opts.spillway_bin)
    if not shutil.which("node"):
        raise BenchError("node not found (apt-get install nodejs npm)")
    if not os.path.isdir(os.path.join(REPO, "tests", "s3", "node_modules", "@20minutes")):
        raise BenchError("s3rver not installed: run `npm ci` in %s/tests/s3" % REPO)
    if not shutil.which(opts.aws):
        raise BenchError("aws CLI not found: apt-get install awscli (or pass --aws PATH)")
    if not shutil.which("fusermount3"):
        raise BenchError("fusermount3 not found")
    need = 5 * opts.size + 512 * MiB  # source, hot file, aws download, server copies
    st = os.statvfs(opts.tmpfs_root)
    if st.f_bavail * st.f_frsize < need:
        raise BenchError("%s has less than %d MiB free" % (opts.tmpfs_root, need // MiB))


def main(argv):
    opts = parse_args(argv)
    names = ("spill", "up", "up_xfer", "restore", "down", "down_xfer", "stream", "startup")
    res = {k: [] for k in names}
    server = None

    def body():
        nonlocal server
        preflight(opts)
        work = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-s3-work-"))
        mntroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-s3-mnt-"))
        shm = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-bench-s3-", dir=opts.tmpfs_root))
        log("starting s3rver")
        server = S3rver(opts.server_root, os.path.join(work, "s3rver.log"))
        server.start()
        env = environment(opts)
        aws = Aws(opts, server, work)
        log("writing %s of random source data" % fmt_size(opts.size))
        src = os.path.join(shm, "source")
        ctx = {"src": src, "sha": make_source(src, opts.size), "aws": aws, "shm": shm}
        hot = 2 * opts.size + 256 * MiB
        ctx["mnt"] = mount_spillway(opts, server, "main", shm, mntroot, work, hot, [])
        if not opts.no_stream:
            shot = max(32 * MiB, opts.size // 4)
            extra = ["min_spill_size=%d" % max(8 * MiB, shot // 4)]
            ctx["smnt"] = mount_spillway(opts, server, "stream", shm, mntroot, work, shot, extra)
        else:
            res.pop("stream")
        total = opts.warmup + opts.reps
        for i in range(total):
            warm = i < opts.warmup
            log("round %d/%d%s" % (i + 1, total, " (warm-up, discarded)" if warm else ""))
            sink = {k: [] for k in res} if warm else res
            one_round(opts, ctx, i, sink)
        for name, proc, _, _ in CLEANUP.daemons:
            if proc.poll() is not None:
                raise BenchError("%s (pid %d) died during the run" % (name, proc.pid))
        for m in [ctx["mnt"]] + ([ctx["smnt"]] if ctx.get("smnt") else []):
            e = stats(m)["errors"]
            if e["io"] or e["crc"]:
                raise BenchError("%s: errors %s" % (m, e))
        med = report(opts, env, res)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"env": env, "size": opts.size, "part_size": opts.part_size,
                           "io_workers": opts.io_workers, "samples": res, "median": med},
                          f, indent=1)

    def server_log():
        if server is not None:
            log("s3rver log tail:\n%s" % server.tail())

    def server_stop():
        # the daemons talk to the server while unmounting: CLEANUP has run first
        if server is not None:
            server.stop()
            shutil.rmtree(server.dir, ignore_errors=True)

    return benchlib.run_guarded(body, catch=(subprocess.TimeoutExpired,),
                                on_failure=server_log, after_cleanup=server_stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
