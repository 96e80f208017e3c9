#!/usr/bin/env python3
"""spillway vs the tools users would pick instead (issue 7), side by side in one run.

Peers (columns), each set up with its documented best-practice options for
"RAM first, overflow to a cold tier", everything on loopback and temp dirs:

  spillway     BUILD/spillway, hot tier on a tmpfs, nvme= a dir on the cold disk
  spillway-s3  the same with s3= a local s3rver bucket (no NVMe tier)
  rclone       rclone mount of a local dir on the cold disk, --vfs-cache-mode full,
               --vfs-cache-max-size BUDGET, --cache-dir on a tmpfs
  rclone-s3    the same with an S3 remote on the local s3rver
  mergerfs     a tmpfs branch (size=BUDGET) + the cold dir, category.create=ff,
               moveonenospc, plus the mergerfs docs' percent-full mover
  s3fs         s3fs-fuse on the local s3rver, use_cache on a tmpfs, ensure_diskfree
               bounding the cache to BUDGET
  passthrough  libfuse's passthrough_ll over a tmpfs of size=BUDGET (the FUSE floor)
  tmpfs        a tmpfs of size=BUDGET (a RAM-only store: fails when full)
  disk         a plain directory on the cold disk (the physical limit)

Workloads (rows): 1. overflow pipeline (examples/longdoc_pipeline, 4x BUDGET);
2. small objects (N x 64 KiB, write then random-order read, cold write
requests counted); 3. hot re-read (BUDGET/2, 3 passes); 4. cold read (a
BUDGET-sized file pushed out of RAM: TTFB and throughput).

Each (peer, workload) gets a fresh instance (fresh dirs, mounts, s3rver),
torn down right after it; everything is also torn down on every exit path
(signals included): FUSE daemons by pid + fusermount3 -u, s3rver/proxy by
pid, tmpfs mounts by umount. A peer failing a workload is a result (printed
in the table), never a harness failure. --tight [SIZE] runs each pair in a
memory cgroup with the peer and its page cache (peers_tight.py); --repeat N
gives medians of N rounds. Run as root. Python 3 stdlib only; uses
bench/benchlib.py's and bench/tight.py's helpers.
"""

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.dont_write_bytecode = True
sys.path.insert(0, BENCH)
import benchlib  # noqa: E402
import peers_report  # noqa: E402
import peers_tight  # noqa: E402
import tight  # noqa: E402
from peers_report import (  # noqa: E402
    METRICS,
    Cell,
    environment,
    gib,
    median_cell,
    report,
    short_summary,
)
from benchlib import (  # noqa: E402
    CLEANUP,
    GiB,
    MiB,
    BenchError,
    drop_caches,
    fmt_size,
    is_mounted,
    log,
    parse_size,
    start_daemon,
    tail,
)

KiB = 1024
PEERS = ("spillway", "spillway-s3", "rclone", "rclone-s3", "mergerfs", "s3fs",
         "passthrough", "tmpfs", "disk")
S3_PEERS = peers_report.S3_PEERS
RAM_ONLY = ("passthrough", "tmpfs")
TIGHT_PEERS = ("spillway", "mergerfs", "disk")
WORKLOADS = ("pipeline", "small", "hot", "cold")
BUCKET = "peers"
S3RVER = os.path.join(REPO, "tests", "s3", "s3rver.js")
S3PROXY = os.path.join(REPO, "tests", "integration", "s3proxy.py")
S3_KEYS = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER"}

# --------------------------------------------------------------------------
# Resources beyond benchlib.CLEANUP's daemons and dirs: tmpfs mounts, helper
# processes (s3rver, the counting proxy) and mover threads.

TMPFS = []  # mount points
PROCS = []  # (name, Popen)
MOVERS = []  # Mover threads


def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0755" % size, "tmpfs", path],
                   check=True, capture_output=True)
    TMPFS.append(path)
    return path


def umount_tmpfs(path):
    if is_mounted(path):
        r = subprocess.run(["umount", path], capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)
    if path in TMPFS and not is_mounted(path):
        TMPFS.remove(path)


def kill_proc(name, p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log("%s (pid %d) ignored SIGTERM, SIGKILL" % (name, p.pid))
            p.kill()
            p.wait()
    if (name, p) in PROCS:
        PROCS.remove((name, p))


def stop_daemon(proc):
    for i, (name, p, mnt, _) in enumerate(CLEANUP.daemons):
        if p is proc:
            ok = CLEANUP.stop_daemon(name, p, mnt)
            del CLEANUP.daemons[i]
            return ok
    return True


def teardown_all():
    """Last resort on every exit path: movers, FUSE daemons, helpers, tmpfs, dirs."""
    for m in list(MOVERS):
        m.stop()
    ok = True
    for name, proc, mnt, _ in reversed(list(CLEANUP.daemons)):
        ok = CLEANUP.stop_daemon(name, proc, mnt) and ok
    CLEANUP.daemons = []
    for name, p in reversed(list(PROCS)):
        kill_proc(name, p)
    for path in reversed(list(TMPFS)):
        umount_tmpfs(path)
    if TMPFS:
        log("tmpfs still mounted: %s" % TMPFS)
        ok = False
    return CLEANUP.run() and ok


def start_helper(name, args, logpath, timeout=20):
    """Start a helper that prints 'ready PORT'; stdin is a pipe (its lifeline)."""
    logf = open(logpath, "w")
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                         text=True)
    logf.close()
    PROCS.append((name, p))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            line = p.stdout.readline()
            if line.startswith("ready "):
                return p, int(line.split()[1])
            if not line:
                break
        if p.poll() is not None:
            break
    kill_proc(name, p)
    raise BenchError("%s did not start:\n%s" % (name, tail(logpath)))


def df_used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def count_files(root):
    n = 0
    for _, _, files in os.walk(root):
        n += len(files)
    return n


def vm_hwm(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * KiB
    except OSError:
        pass
    return None


class Sampler(threading.Thread):
    """Peak of df-used of a tmpfs mount, sampled every 0.2 s."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.peak, self.halt = path, 0, threading.Event()

    def run(self):
        while True:
            try:
                self.peak = max(self.peak, df_used(self.path))
            except OSError:
                pass
            if self.halt.wait(0.2):
                return

    def stop(self):
        self.halt.set()
        self.join()
        try:
            self.peak = max(self.peak, df_used(self.path))
        except OSError:
            pass
        return self.peak


class Mover(threading.Thread):
    """The mergerfs docs' "percentage full expiring" script, every `every` s:
    while the cache branch is above `pct` % full, move its least recently
    accessed file (by atime) to the same path on the backing branch
    (copy, then remove the source, as rsync --remove-source-files)."""

    def __init__(self, cache, backing, pct, every=2.0, cg=None):
        super().__init__(daemon=True)
        self.cache, self.backing, self.pct, self.every = cache, backing, pct, every
        self.cg = cg  # tight mode: the copies run in the cgroup (their page cache too)
        self.halt = threading.Event()
        self.moved = 0
        self.errors = []
        MOVERS.append(self)
        self.start()

    def full_pct(self):
        st = os.statvfs(self.cache)
        return 100.0 * (st.f_blocks - st.f_bfree) / max(1, st.f_blocks)

    def oldest(self):
        best = None
        for d, _, files in os.walk(self.cache):
            for f in files:
                p = os.path.join(d, f)
                try:
                    a = os.lstat(p).st_atime
                except OSError:
                    continue
                if best is None or a < best[0]:
                    best = (a, p)
        return best[1] if best else None

    def move(self, src):
        rel = os.path.relpath(src, self.cache)
        dst = os.path.join(self.backing, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = os.path.join(os.path.dirname(dst), ".%s.mover" % os.path.basename(dst))
        if self.cg is None:
            shutil.copy2(src, tmp)
        else:
            r = subprocess.run(["cp", "--preserve=mode,timestamps", src, tmp],
                               preexec_fn=self.cg.preexec, capture_output=True, text=True)
            if r.returncode != 0:
                raise OSError(r.returncode, "cp: " + r.stderr.strip()[-200:])
        os.rename(tmp, dst)
        os.unlink(src)
        self.moved += 1

    def pass_once(self, pct=None):
        pct = self.pct if pct is None else pct
        while not self.halt.is_set() and self.full_pct() > pct:
            src = self.oldest()
            if not src:
                return
            try:
                self.move(src)
            except OSError as e:
                self.errors.append("%s: %s" % (src, e))
                return

    def run(self):
        while not self.halt.wait(self.every):
            self.pass_once()

    def stop(self):
        self.halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()
        if self in MOVERS:
            MOVERS.remove(self)


# --------------------------------------------------------------------------
# Peers: one Instance per (peer, workload).


class Instance:
    def __init__(self, ctx, peer, count_puts=False):
        self.ctx, self.peer = ctx, peer
        self.base_shm = tempfile.mkdtemp(prefix="p-", dir=ctx.shmroot)
        self.base_cold = tempfile.mkdtemp(prefix="p-", dir=ctx.coldroot)
        self.mnt = tempfile.mkdtemp(prefix=peer + "-", dir=ctx.mntroot)
        self.dir = None  # where the workload runs
        self.ram = None  # tmpfs mount holding the peer's RAM tier/cache
        self.proc = None  # the FUSE daemon
        self.s3port = None  # port clients use (the proxy's when counting)
        self.proxy_port = None
        self.s3data = None
        self.mover = None
        self.restart_args = None
        self.log = os.path.join(ctx.logdir, "%s-%d.log" % (peer, len(ctx.instances)))
        self.undo = []
        ctx.instances.append(self)
        getattr(self, "setup_" + peer.replace("-", "_"))(count_puts)

    # -- building blocks
    def tmpfs(self, name, size):
        path = mount_tmpfs(os.path.join(self.base_shm, name), size)
        self.undo.append(lambda: umount_tmpfs(path))
        return path

    def s3(self, count_puts, shim=False):
        self.s3data = os.path.join(self.base_cold, "s3data")
        os.mkdir(self.s3data)
        p, port = start_helper("s3rver", ["node", S3RVER, "--dir", self.s3data, "--port", "0",
                                          "--bucket", BUCKET], self.log + ".s3rver")
        self.undo.append(lambda: kill_proc("s3rver", p))
        self.s3port = port
        if count_puts or shim:
            args = [sys.executable, S3PROXY, "--upstream", "127.0.0.1:%d" % port, "--port", "0",
                    "--rate", "0"]
            if shim:
                args = [sys.executable, os.path.abspath(__file__), "--s3fs-shim", str(port)]
            pp, pport = start_helper("s3proxy", args, self.log + ".proxy")
            self.undo.append(lambda: kill_proc("s3proxy", pp))
            self.s3port = self.proxy_port = pport
        return "http://127.0.0.1:%d" % self.s3port

    def daemon(self, args, env=None):
        full = dict(os.environ)
        full.update(env or {})
        # loopback http only; a CA bundle from the environment makes rclone's
        # S3 backend refuse to start (LoadCustomCABundleError)
        full.pop("AWS_CA_BUNDLE", None)
        self.restart_args = (args, full)
        self.proc = start_daemon(self.peer, args, self.mnt, self.log, full,
                                 preexec_fn=self.ctx.preexec)
        self.undo.append(self.stop_daemon)
        self.dir = self.mnt

    def stop_daemon(self):
        if self.proc is not None:
            self.hwm = max(getattr(self, "hwm", 0) or 0, vm_hwm(self.proc.pid) or 0)
            stop_daemon(self.proc)
            self.proc = None

    def restart(self, wipe=None):
        """Unmount and mount again (wiping the cache dir `wipe` in between)."""
        self.stop_daemon()
        if wipe:
            for e in os.listdir(wipe):
                p = os.path.join(wipe, e)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        args, env = self.restart_args
        self.proc = start_daemon(self.peer, args, self.mnt, self.log + ".2", env,
                                 preexec_fn=self.ctx.preexec)

    def big_tmpfs(self):
        """A tmpfs that never limits the peer (the peer bounds itself)."""
        return self.ctx.big_tmpfs

    # -- peers
    def setup_spillway(self, count_puts, s3=False):
        c = self.ctx
        self.ram = self.tmpfs("hot", self.big_tmpfs())
        o = "hot_dir=%s/hot,hot_size=%s,min_spill_size=%s" % (
            self.ram, fmt_size(c.budget), fmt_size(c.min_spill))
        if c.spillway_opts:
            o += "," + c.spillway_opts
        env = {}
        if s3:
            url = self.s3(count_puts)
            o += ",s3=s3://%s/spw,s3_endpoint=%s,s3_path_style" % (BUCKET, url)
            state = os.path.join(self.base_cold, "spw-state")
            os.mkdir(state)
            o += ",state_dir=" + state
            env = S3_KEYS
        else:
            cold = os.path.join(self.base_cold, "spw")
            os.mkdir(cold)
            o += ",nvme=" + cold
        self.daemon([c.spillway_bin, "-f", "-o", o, self.mnt], env)

    def setup_spillway_s3(self, count_puts):
        self.setup_spillway(count_puts, s3=True)

    def setup_rclone(self, count_puts, s3=False):
        c = self.ctx
        self.ram = self.tmpfs("cache", self.big_tmpfs())
        env = {"RCLONE_CONFIG": c.rclone_conf}
        if s3:
            url = self.s3(count_puts)
            remote = "s3:%s/rc" % BUCKET
            env.update(RCLONE_CONFIG_S3_TYPE="s3", RCLONE_CONFIG_S3_PROVIDER="Other",
                       RCLONE_CONFIG_S3_ENDPOINT=url, RCLONE_CONFIG_S3_REGION="us-east-1",
                       RCLONE_CONFIG_S3_ACCESS_KEY_ID="S3RVER",
                       RCLONE_CONFIG_S3_SECRET_ACCESS_KEY="S3RVER",
                       RCLONE_CONFIG_S3_FORCE_PATH_STYLE="true",
                       RCLONE_CONFIG_S3_NO_CHECK_BUCKET="true")
        else:
            remote = self.cold = os.path.join(self.base_cold, "rc")
            os.mkdir(remote)
        # --vfs-cache-poll-interval: the size limit is only enforced on this
        # tick (default 1m, far too slow for a cache filled in seconds).
        self.daemon(["rclone", "mount", remote, self.mnt, "--vfs-cache-mode", "full",
                     "--vfs-cache-max-size", fmt_size(c.budget), "--cache-dir", self.ram,
                     "--vfs-cache-poll-interval", "5s", "--dir-cache-time", "1h",
                     "--log-level", "NOTICE"], env)

    def setup_rclone_s3(self, count_puts):
        self.setup_rclone(count_puts, s3=True)

    def setup_mergerfs(self, count_puts):
        c = self.ctx
        self.ram = self.tmpfs("branch", c.budget)
        self.cold = os.path.join(self.base_cold, "mfs")
        os.mkdir(self.cold)
        o = ("category.create=ff,moveonenospc=true,minfreespace=%s,use_ino,"
             "cache.files=partial,dropcacheonclose=true,fsname=peers-mergerfs"
             % fmt_size(c.budget // 16))
        self.daemon(["mergerfs", "-f", "-o", o, "%s:%s" % (self.ram, self.cold), self.mnt])
        self.mover = Mover(self.ram, self.cold, 80, cg=c.cg)
        self.undo.append(self.mover.stop)

    def setup_s3fs(self, count_puts):
        c = self.ctx
        url = self.s3(count_puts, shim=True)
        size = self.big_tmpfs()
        self.ram = self.tmpfs("cache", size)
        # s3fs has no cache size limit; ensure_diskfree (MB) keeps that much of
        # the cache filesystem free, i.e. bounds the cache to BUDGET here.
        keep = (size - c.budget) // MiB
        o = ("url=%s,use_path_request_style,endpoint=us-east-1,passwd_file=%s,use_cache=%s,"
             "ensure_diskfree=%d,del_cache" % (url, c.s3fs_passwd, self.ram, keep))
        self.daemon(["s3fs", BUCKET, self.mnt, "-f", "-o", o])

    def setup_passthrough(self, count_puts):
        self.ram = self.tmpfs("src", self.ctx.budget)
        self.daemon([self.ctx.tools["passthrough"], "-f", "-o", "source=" + self.ram, self.mnt])

    def setup_tmpfs(self, count_puts):
        self.ram = self.dir = self.tmpfs("store", self.ctx.budget)

    def setup_disk(self, count_puts):
        self.dir = os.path.join(self.base_cold, "disk")
        os.mkdir(self.dir)

    # -- measurements
    def spw_stats(self):
        return json.loads(os.getxattr(self.mnt, "user.spillway.stats"))

    def cold_writes(self):
        """Write requests that reached the cold tier: segments for spillway,
        PUT/POST requests for S3 peers, files created on the cold dir else."""
        if self.peer == "spillway":
            return self.spw_stats()["segments"]["written"], "segments"
        if self.proxy_port:
            u = "http://127.0.0.1:%d/__s3proxy__/stats" % self.proxy_port
            with urllib.request.urlopen(u, timeout=10) as r:
                req = json.loads(r.read())["requests"]
            return req.get("PUT", 0) + req.get("POST", 0), "PUT+POST"
        if self.peer in ("rclone", "mergerfs"):
            return count_files(self.cold), "files"
        return None, ""

    def stop(self):
        while self.undo:
            fn = self.undo.pop()
            try:
                fn()
            except Exception as e:  # keep tearing down
                log("%s teardown: %s" % (self.peer, e))
        for d in (self.base_shm, self.base_cold, self.mnt):
            if not any(m == d or m.startswith(d + "/") for m in benchlib.mountpoints()):
                shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Running clients: a failure or timeout is a result, not an exception.


def run_client(ctx, args, timeout):
    """Returns (rc or None on timeout, stdout, stderr, seconds). In tight
    mode the client runs in the run's cgroup."""
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=ctx.preexec)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        benchlib.reap(p)
        return None, "", "timed out after %ds" % timeout, time.monotonic() - t0
    except BaseException:
        benchlib.reap(p)
        raise


def parse_kv(line):
    d = {}
    for tok in line.split()[1:]:
        k, _, v = tok.partition("=")
        d[k] = v
    return d


def peerio(ctx, args, timeout):
    """Run peerio; returns (ok, fields, seconds, failure text)."""
    rc, out, err, secs = run_client(ctx, [ctx.tools["peerio"]] + [str(a) for a in args],
                                    timeout)
    line = (out.strip().splitlines() or [""])[-1]
    if rc is None:
        return False, {}, secs, "TIMEOUT after %ds" % timeout
    if rc == 0 and line.startswith("OK"):
        return True, parse_kv(line), secs, None
    f = parse_kv(line) if line.startswith("ERR") else {}
    return False, f, secs, f.get("err") or (err.strip()[-200:] or "exit %d" % rc)


def s3fs_shim(upstream_port):
    """s3fs 1.90 signs a bucket-root request (GET /bucket/?list...) with the
    canonical URI "/bucket/"; s3rver verifies it as "/bucket" and answers 403,
    so s3fs refuses to mount. This runs tests/integration/s3proxy.py's
    forwarding proxy (no faults, counting requests) and re-signs exactly those
    requests the way s3rver computes them (it knows the local test key).
    Everything else is forwarded byte for byte."""
    import hashlib
    import hmac
    import re
    import urllib.parse

    sys.path.insert(0, os.path.dirname(S3PROXY))
    import s3proxy

    secret = S3_KEYS["AWS_SECRET_ACCESS_KEY"]
    orig = s3proxy._read_head

    def enc(x):
        return urllib.parse.quote(x, safe="-_.!~*'()")

    def resign(raw):
        (method, target, *_), hdrs = s3proxy._parse_head(raw)
        path, _, query = target.partition("?")
        auth = hdrs.get("authorization", "")
        m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                     r" ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]+)", auth)
        if not m or not re.fullmatch(r"/[^/]+/", path):
            return raw
        key, date, region, service, signed, sig = m.groups()
        q = sorted("%s=%s" % (enc(k), enc(v))
                   for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True))
        creq = "\n".join([method, path[:-1], "&".join(q),
                          "".join("%s:%s\n" % (h, hdrs.get(h, "")) for h in signed.split(";")),
                          signed, hdrs.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")])
        sts = "\n".join(["AWS4-HMAC-SHA256", hdrs.get("x-amz-date", ""),
                         "%s/%s/%s/aws4_request" % (date, region, service),
                         hashlib.sha256(creq.encode()).hexdigest()])
        k = ("AWS4" + secret).encode()
        for part in (date, region, service, "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        new = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        return raw.replace(sig.encode(), new.encode())

    def read_head(f):
        raw = orig(f)
        return resign(raw) if raw and not raw.startswith(b"HTTP/") else raw

    s3proxy._read_head = read_head
    p = s3proxy.FaultProxy("127.0.0.1:%d" % upstream_port, rate=0.0).start()
    print("ready %d" % p.port, flush=True)
    sys.stdin.read()  # the parent's lifeline
    p.stop()
    return 0


def workload_pipeline(ctx, inst, res):
    total = ctx.overflow * ctx.budget
    smp = Sampler(inst.ram) if inst.ram else None
    smp and smp.start()
    rc, out, err, secs = run_client(ctx, [ctx.pipeline, inst.dir, "-p", "8", "-t", str(total),
                                          "-s", str(ctx.pipe_file)], ctx.t_pipeline)
    peak = smp.stop() if smp else None
    res["pipe_ram"] = peak / MiB if peak is not None else None
    if rc == 0:
        res["pipe_wall"] = secs
        for line in out.splitlines():
            if line.startswith("produce:"):
                res["pipe_write"] = total / MiB / float(line.split()[1])
            if line.startswith("aggregate:") and line.endswith("files verified"):
                res.verified = int(line.split()[-3])
    else:
        why = "TIMEOUT after %ds" % ctx.t_pipeline if rc is None else first_error(err or out)
        used = " after %s" % gib(peak) if peak else ""
        res.fail(("pipe_wall", "pipe_write"), "FAILED: %s%s" % (why, used))


def first_error(text):
    """The first error of a client's stderr, as ENOSPC/EIO/... when known."""
    for line in text.splitlines():
        for key, short in (("No space left", "ENOSPC"), ("Input/output", "EIO"),
                           ("checksum", "BAD DATA"), ("not connected", "ENOTCONN"),
                           ("No such file", "ENOENT")):
            if key in line:
                return short
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0].rsplit(": ", 1)[-1][:60] if lines else "error"


def workload_small(ctx, inst, res):
    n, size = ctx.small_n, 64 * KiB
    smp = Sampler(inst.ram) if inst.ram else None
    smp and smp.start()
    ok, f, secs, why = peerio(ctx, ["small-write", inst.dir, n, size, 4], ctx.t_small)
    if ok:
        res["small_w"] = n / float(f["secs"])
        drop_caches(3)
        ok, f, secs, why = peerio(ctx, ["small-read", inst.dir, n, size, 4], ctx.t_small)
        if ok:
            res["small_r"] = n / float(f["secs"])
        else:
            res.fail(("small_r",), "FAILED read: %s%s" % (why, objs_done(f)))
    else:
        res.fail(("small_w", "small_r"), "FAILED: %s%s" % (why, objs_done(f)))
    if inst.peer in ("rclone", "rclone-s3"):
        # write-back uploads trail the writes by --vfs-write-back (5 s): wait
        # for one upload per object, or for the count to stop moving
        settle(inst, n, ctx.settle_quiet, ctx.t_small)
    peak = smp.stop() if smp else None
    res["small_ram"] = peak / MiB if peak is not None else None
    cw, unit = inst.cold_writes()
    if cw is not None:
        res["small_cold"] = cw
        res.units["small_cold"] = unit


def objs_done(f):
    return " after %s objects" % f["done"] if "done" in f else ""


def settle(inst, want, quiet, limit, min_wait=8.0):
    last, since, t0 = None, time.monotonic(), time.monotonic()
    while time.monotonic() - t0 < limit:
        n = inst.cold_writes()[0]
        if n >= want:
            return
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet and time.monotonic() - t0 >= min_wait:
            return
        time.sleep(1)


def workload_hot(ctx, inst, res):
    nfiles = max(1, ctx.hot_size // ctx.hot_file)
    paths = [os.path.join(inst.dir, "hot-%03d" % i) for i in range(nfiles)]
    for i, p in enumerate(paths):
        ok, f, _, why = peerio(ctx, ["write", p, ctx.hot_file, i], ctx.t_io)
        if not ok:
            res.fail(("hot",), "FAILED write: %s" % why)
            return
    total = 0.0
    for rnd in range(3):
        for i, p in enumerate(paths):
            ok, f, _, why = peerio(ctx, ["read", p, ctx.hot_file, i], ctx.t_io)
            if not ok:
                res.fail(("hot",), "FAILED read: %s" % why)
                return
            total += float(f["secs"])
    res["hot"] = 3 * nfiles * ctx.hot_file / MiB / total


def workload_cold(ctx, inst, res):
    size = ctx.cold_size
    p = os.path.join(inst.dir, "cold.bin")
    ok, f, _, why = peerio(ctx, ["write", p, size, 99], ctx.t_io)
    if not ok:
        res.fail(("ttfb", "cold"), "FAILED write: %s" % why)
        return
    if inst.peer in RAM_ONLY:
        res.fail(("ttfb", "cold"), "n/a: RAM only")
        return
    how = push_out(ctx, inst, p, size)
    drop_caches(3)
    ok, f, _, why = peerio(ctx, ["read", p, size, 99], ctx.t_io)
    if not ok:
        res.fail(("ttfb", "cold"), "FAILED read: %s" % why)
        return
    res["ttfb"] = float(f["ttfb"]) * 1000
    res["cold"] = size / MiB / float(f["secs"])
    res.notes.append("cold read: pushed out by %s" % how)


def push_out(ctx, inst, path, size):
    if inst.peer.startswith("spillway"):
        os.setxattr(path, "user.spillway.evict", b"1")
        st = inst.spw_stats()
        return "setxattr user.spillway.evict (hot used after: %d MiB)" % (st["hot"]["used"] // MiB)
    if inst.peer == "mergerfs":
        inst.mover.pass_once(pct=-1)  # the mover, with the threshold at 0 %
        if not os.path.exists(os.path.join(inst.cold, "cold.bin")):
            raise BenchError("mergerfs: the mover did not move cold.bin")
        return "the mover (file moved to the cold branch)"
    if inst.peer == "disk":
        os.sync()
        return "sync + drop_caches"
    if inst.peer in ("rclone", "rclone-s3"):
        wait_uploaded(inst, size)
        inst.restart(wipe=inst.ram)
        return "waiting for the upload, remount with an empty --cache-dir"
    if inst.peer == "s3fs":
        inst.restart(wipe=inst.ram)  # s3fs uploads on close
        return "remount with an empty use_cache dir"
    raise BenchError("no push-out for %s" % inst.peer)


def wait_uploaded(inst, size, limit=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if inst.peer == "rclone":
            try:
                if os.path.getsize(os.path.join(inst.cold, "cold.bin")) == size:
                    return
            except OSError:
                pass
        else:
            for d, _, files in os.walk(inst.s3data):
                for f in files:
                    if f.startswith("cold.bin") and f.endswith("_S3rver_object"):
                        meta = os.path.join(d, f[: -len("object")] + "metadata.json")
                        if os.path.getsize(os.path.join(d, f)) == size and os.path.exists(meta):
                            time.sleep(1)  # let s3rver finish the PUT's reply
                            return
        time.sleep(0.5)
    raise BenchError("%s: cold.bin not uploaded within %ds" % (inst.peer, limit))


# --------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/peers/run.sh",
                                description="spillway vs rclone, mergerfs, s3fs, passthrough_ll,"
                                            " tmpfs, disk (issue 7)")
    p.add_argument("--quick", action="store_true", help="smoke run: 64M budget, tiny sizes")
    p.add_argument("--budget", type=parse_size, help="RAM budget (default 1G; quick 64M)")
    p.add_argument("--small-n", type=int, help="small objects (default 30000; quick 1000)")
    p.add_argument("--peers", help="comma list, default all (with --tight: %s)"
                   % ",".join(TIGHT_PEERS))
    p.add_argument("--workloads", help="comma list, default all (with --tight: pipeline)")
    p.add_argument("--tight", nargs="?", const="auto", metavar="SIZE",
                   help="each run in one memory cgroup of SIZE with the peer and its page"
                        " cache (default: the budget + 256M)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every (peer, workload), the peer order alternating;"
                        " medians")
    p.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                     os.path.join(REPO, "build")))
    p.add_argument("--cold-root", default="/var/tmp", help="cold disk dir (default /var/tmp)")
    p.add_argument("--tmpfs-root", default="/dev/shm")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--spillway-opts", default="",
                   help="extra -o options for spillway (e.g. passthrough=off)")
    p.add_argument("--min-rate", type=int, default=30, metavar="MIB_S",
                   help="pipeline slower than this (write+read) is cut off as TIMEOUT"
                        " (default 30); small objects: 100 obj/s")
    o = p.parse_args(argv)
    o.budget = o.budget or (64 * MiB if o.quick else GiB)
    o.small_n = o.small_n or (100 if o.quick else 20000)
    if o.tight is not None:
        try:
            o.tight = (peers_tight.default_size(o.budget) if o.tight == "auto"
                       else parse_size(o.tight))
        except argparse.ArgumentTypeError as e:
            p.error("--tight: %s" % e)
    if o.repeat < 1:
        p.error("--repeat: at least 1")
    o.peers = o.peers or ",".join(TIGHT_PEERS if o.tight else PEERS)
    o.workloads = o.workloads or ("pipeline" if o.tight else ",".join(WORKLOADS))
    o.cg = o.preexec = None  # the cgroup of the run in progress (tight mode)
    want_p = [x.strip() for x in o.peers.split(",") if x.strip()]
    want_w = [x.strip() for x in o.workloads.split(",") if x.strip()]
    bad = [x for x in want_p if x not in PEERS] + [x for x in want_w if x not in WORKLOADS]
    if bad or not want_p or not want_w:
        p.error("unknown or empty --peers/--workloads: %s (peers: %s; workloads: %s)"
                % (",".join(bad), ",".join(PEERS), ",".join(WORKLOADS)))
    o.peers = [x for x in PEERS if x in want_p]
    o.workloads = [x for x in WORKLOADS if x in want_w]
    # quick: the pipeline overflows 2x (not 4x) and hot/cold sets are smaller,
    # to stay a smoke test (< 90 s) on a busy 2-core box
    o.overflow = 2 if o.quick else 4
    o.pipe_file = min(64 * MiB, o.budget // 4)
    o.min_spill = min(64 * MiB, o.budget // 4)
    o.hot_size = o.budget // (4 if o.quick else 2)
    o.hot_file = min(64 * MiB, o.hot_size // 4)
    o.cold_size = o.budget // (2 if o.quick else 1)
    o.settle_quiet = 2.0 if o.quick else 6.0
    o.build = os.path.abspath(o.build)
    o.spillway_bin = os.path.join(o.build, "spillway")
    o.pipeline = os.path.join(o.build, "examples", "longdoc_pipeline")
    # timeouts: below ~15 MiB/s (or 50 small objects/s) a peer is out of the race
    floor = 30 if o.quick else 60
    o.t_pipeline = max(floor, 2 * o.overflow * o.budget // (o.min_rate * MiB))
    o.t_small = max(floor, o.small_n // 100)
    o.t_io = max(floor, o.budget // (o.min_rate * MiB // 2))
    return o


def preflight(ctx):
    if os.geteuid() != 0:
        raise BenchError("run as root (tmpfs mounts, drop_caches, FUSE)")
    if not os.path.exists("/dev/fuse"):
        raise BenchError("/dev/fuse is missing")
    need = {"spillway": [ctx.spillway_bin, ctx.pipeline], "rclone": ["rclone"],
            "mergerfs": ["mergerfs"], "s3fs": ["s3fs", "node"], "passthrough": ["pkg-config"]}
    need["spillway-s3"] = need["spillway"] + ["node"]
    need["rclone-s3"] = ["rclone", "node"]
    for tool in ("cc", "fusermount3", "mount", "umount"):
        if not shutil.which(tool):
            raise BenchError("%s not found in PATH" % tool)
    missing = []
    for peer in ctx.peers:
        for t in need.get(peer, []):
            if not (shutil.which(t) or os.access(t, os.X_OK)):
                missing.append("%s (for %s)" % (t, peer))
    if "pipeline" in ctx.workloads and not os.access(ctx.pipeline, os.X_OK):
        missing.append(ctx.pipeline)
    if missing:
        raise BenchError("missing: %s (apt-get install rclone mergerfs s3fs nodejs;"
                         " build spillway)" % ", ".join(sorted(set(missing))))
    if any(p in S3_PEERS for p in ctx.peers) and not os.path.isdir(
            os.path.join(REPO, "tests/s3/node_modules/@20minutes/s3rver")):
        raise BenchError("run npm ci in tests/s3 (the local s3rver)")
    benchlib.raise_nofile()
    with open("/proc/meminfo") as f:
        avail = next(int(ln.split()[1]) * KiB for ln in f if ln.startswith("MemAvailable"))
    ctx.big_tmpfs = max(6 * ctx.budget, avail // 2)
    if avail < 6 * ctx.budget:
        raise BenchError("MemAvailable %d MiB: need ~%d MiB for a %s budget"
                         % (avail // MiB, 6 * ctx.budget // MiB, fmt_size(ctx.budget)))


def build_tools(ctx):
    tools = {}
    if "passthrough" in ctx.peers:
        r = subprocess.run([os.path.join(BENCH, "build_passthrough.sh"), ctx.tooldir],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError("building passthrough_ll failed:\n" + r.stderr + r.stdout)
        tools["passthrough"] = os.path.join(ctx.tooldir, "passthrough_ll")
    out = os.path.join(ctx.tooldir, "peerio")
    r = subprocess.run(["cc", "-O2", "-Wall", "-pthread", "-o", out,
                        os.path.join(HERE, "peerio.c")], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError("building peerio failed:\n" + r.stderr)
    tools["peerio"] = out
    ctx.tools = tools
    ctx.rclone_conf = os.path.join(ctx.tooldir, "rclone.conf")
    open(ctx.rclone_conf, "w").close()
    ctx.s3fs_passwd = os.path.join(ctx.tooldir, "s3fs.passwd")
    fd = os.open(ctx.s3fs_passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, b"S3RVER:S3RVER\n")
    os.close(fd)


RUNNERS = {"pipeline": workload_pipeline, "small": workload_small, "hot": workload_hot,
           "cold": workload_cold}


def run_one(ctx, peer, wl):
    res = Cell()
    t0 = time.monotonic()
    inst = None
    cg = None
    try:
        cg = peers_tight.Run(ctx, peer) if ctx.tight else None
        try:
            inst = Instance(ctx, peer, count_puts=(wl == "small" and peer in S3_PEERS))
        except BenchError as e:  # a peer that cannot mount is a result
            log("%s: %s" % (peer, e))
            res.fail([k for k, w, *_ in METRICS if w == wl],
                     "FAILED: setup: %s" % str(e).splitlines()[0][:80])
            return res
        RUNNERS[wl](ctx, inst, res)
        if cg is not None:
            cg.finish(ctx, res, inst.proc.pid if inst.proc is not None else None)
        if wl == "pipeline" and inst.proc is not None:
            res["pipe_rss"] = (vm_hwm(inst.proc.pid) or 0) / MiB
        if inst.mover and inst.mover.errors:
            res.notes.append("mover: %d errors, first: %s" % (len(inst.mover.errors),
                                                               inst.mover.errors[0]))
        if inst.proc is not None and inst.proc.poll() is not None:
            res.fail([k for k, w, *_ in METRICS if w == wl],
                     "FAILED: daemon died (status %d)" % inst.proc.returncode)
    finally:
        if inst is not None:
            inst.stop()
        elif ctx.instances:
            ctx.instances[-1].stop()
        if cg is not None:
            cg.remove(ctx)
    log("%-12s %-9s %5.1fs  %s" % (peer, wl, time.monotonic() - t0, short_summary(res)))
    return res


def main(argv):
    if argv[:1] == ["--s3fs-shim"]:
        return s3fs_shim(int(argv[1]))
    ctx = parse_args(argv)
    ctx.instances = []
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, benchlib.on_signal)
    ok = False
    t_start = time.monotonic()
    try:
        preflight(ctx)
        ctx.tooldir = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-peers-tools-"))
        ctx.logdir = ctx.tooldir
        ctx.mntroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-peers-mnt-"))
        ctx.shmroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-peers-", dir=ctx.tmpfs_root))
        ctx.coldroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-peers-", dir=ctx.cold_root))
        build_tools(ctx)
        env = environment(ctx)
        if ctx.tight:
            probe = tight.create(ctx.tight, "probe")
            ctx.tight_where = probe.where
            probe.remove()
            env["tight"] = "one %s memory cgroup per run: %s" % (fmt_size(ctx.tight),
                                                                 ctx.tight_where)
        runs = {p: {w: [] for w in ctx.workloads} for p in ctx.peers}
        for rnd in range(ctx.repeat):
            for wl in ctx.workloads:
                for peer in (ctx.peers if rnd % 2 == 0 else ctx.peers[::-1]):
                    runs[peer][wl].append(run_one(ctx, peer, wl))
        results = {p: {w: median_cell(cs) for w, cs in r.items()} for p, r in runs.items()}
        report(ctx, env, results)
        if ctx.tight and "pipeline" in ctx.workloads:
            peers_tight.report(ctx, {p: runs[p]["pipeline"] for p in ctx.peers})
        print("bench time: %.0f s" % (time.monotonic() - t_start))
        if ctx.json:
            with open(ctx.json, "w") as f:
                json.dump({"env": env, "budget": ctx.budget, "small_n": ctx.small_n,
                           "tight": ctx.tight, "repeat": ctx.repeat,
                           "results": {p: {w: dict(c, notes=c.notes) for w, c in r.items()}
                                       for p, r in results.items()},
                           "runs": {p: {w: [dict(c, notes=c.notes,
                                                 tight=getattr(c, "tight", None),
                                                 verified=getattr(c, "verified", None))
                                            for c in cs] for w, cs in r.items()}
                                    for p, r in runs.items()}}, f, indent=1)
        ok = True
    except (BenchError, OSError, subprocess.CalledProcessError, tight.TightError) as e:
        log("FAILED: %s" % e)
        benchlib.print_daemon_logs()
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if not teardown_all():
            log("FAILED: cleanup left something behind")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
