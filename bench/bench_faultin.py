#!/usr/bin/env python3
"""spillway fault-in benchmark (issue 13): cold reads at device speed.

One run prints, for each build given (--build, and --base for a before/after
comparison), against plain files on the same cold disk:

  first byte  open + 4 KiB pread of an evicted file, caches dropped, at
              offset 0 and at a random offset, over --files files
              (restore=lazy: the fault-in path alone; then ", open": the
              same with restore=open, the default, whose open starts the
              whole file's restore), p50/p99;
  random 4k   4 KiB preads at random offsets of evicted files (each file
              evicted again before its read), p50/p99: open + pread + close,
              and ("random 4k, open") preads on one handle per file (the
              first read of a handle restores its chunk, later jumps read
              only their blocks);
  sequential  a cold --seq-size file read through the mount (1 MiB reads,
              restore=open, the default) vs fio sequential read (io_uring,
              O_DIRECT, 1 MiB, iodepth 8) of a file in the cold directory;
  cpu         daemon user+sys CPU seconds (/proc/PID/stat) per GiB spilled
              (evict of the sequential file) and per GiB restored (its read);
  s3          with node and tests/s3 installed (--no-s3 skips it): the same
              first byte of files evicted to S3 only (tests/s3/s3rver.js on
              the cold disk, restore=lazy) vs one 4 KiB ranged GET of a
              segment object on the same server (SigV4, kept-alive
              connection, a random offset of the next object each time,
              caches dropped before each batch as for the mount). The
              first-byte reads follow one another as soon as each returns,
              so the rest of the previous file's chunk (a 4 MiB GET) is
              still being served; "idle" waits for it between reads (not
              timed), as a lone ranged GET has the server to itself.

Plain files have their page cache dropped with posix_fadvise(DONTNEED) and
/proc/sys/vm/drop_caches before every sample. Run as root:

  python3 bench/bench_faultin.py --build build [--base OLD_BUILD] [--cold /var/tmp]
"""

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

MiB = 1 << 20
KiB = 1 << 10
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S3RVER_JS = os.path.join(REPO, "tests", "s3", "s3rver.js")
BUCKET = "fib"
EXTRA_OPTS = ""  # --spillway-opts
KEY_ID = SECRET = "S3RVER"


def parse_size(v):
    """'256M', '1G', '4096' -> bytes."""
    v = v.strip()
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}.get(v[-1:].upper(), 1)
    return int(float(v[:-1] if mult > 1 else v) * mult)


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Mount:
    def __init__(self, binary, cold_root, opts, s3=None):
        self.hot = tempfile.mkdtemp(prefix="fib-hot-", dir="/dev/shm")
        self.cold = tempfile.mkdtemp(prefix="fib-cold-", dir=cold_root)
        self.mnt = tempfile.mkdtemp(prefix="fib-mnt-")
        self.log = tempfile.mktemp(prefix="fib-log-")
        cold = ("nvme=" + self.cold) if s3 is None else (
            "s3=s3://%s/spw,s3_endpoint=%s,s3_path_style" % (BUCKET, s3.endpoint))
        o = "hot_dir=%s,hot_size=3G,%s,min_spill_size=64M,chunk_size=4M,state_dir=none" % (
            self.hot, cold) + ("," + opts if opts else "") + (
            "," + EXTRA_OPTS if EXTRA_OPTS else "")
        self.proc = subprocess.Popen([binary, "-f", "-o", o, self.mnt],
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        t0 = time.time()
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() - t0 > 20:
                msg = open(self.log).read()[-2000:]
                self.close()
                raise RuntimeError("mount failed: " + msg)
            time.sleep(0.05)

    def path(self, n):
        return os.path.join(self.mnt, n)

    def stats(self):
        return json.loads(os.getxattr(self.mnt, "user.spillway.stats"))

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for d in (self.hot, self.cold, self.mnt):
            shutil.rmtree(d, ignore_errors=True)
        os.unlink(self.log)


def write_file(path, size, seed, sync=False):
    rng = random.Random(seed)
    blk = rng.randbytes(MiB)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for off in range(0, size, MiB):
            os.pwrite(fd, blk[:min(MiB, size - off)], off)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def evict(path):
    os.setxattr(path, "user.spillway.evict", b"1")


def timed_read(path, off, n=4 * KiB, plain=False):
    if plain:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        if not plain:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        b = os.pread(fd, n, off)
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    assert len(b) == n
    return dt


def first_byte(binary, a, plain_dir):
    """{case: [seconds]} for spillway (restore=lazy) and plain files."""
    m = Mount(binary, a.cold, "restore=lazy")
    out = {}
    try:
        names = ["f%03d" % i for i in range(a.files)]
        for i, n in enumerate(names):
            write_file(m.path(n), a.file_size, i)
            if not os.path.exists(os.path.join(plain_dir, n)):
                write_file(os.path.join(plain_dir, n), a.file_size, i, sync=True)
        rng = random.Random(7)
        offs = [rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096 for _ in names]

        def fresh(kind):
            """The paths of kind's files: spillway's evicted again; caches dropped."""
            if kind == "spillway":
                for n in names:
                    evict(m.path(n))
            drop_caches()
            return [m.path(n) if kind == "spillway" else os.path.join(plain_dir, n)
                    for n in names]

        for case, olist in (("offset 0", [0] * len(names)), ("random offset", offs)):
            for kind in ("spillway", "plain"):
                out[(case, kind)] = [timed_read(p, off, plain=kind == "plain")
                                     for p, off in zip(fresh(kind), olist)]
        # random 4k reads, files evicted again, 4 reads per file
        for kind in ("spillway", "plain"):
            xs = []
            paths = fresh(kind)
            for r in range(4):
                for p in paths:
                    off = rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096
                    xs.append(timed_read(p, off, plain=kind == "plain"))
            out[("random 4k", kind)] = xs
        # random 4k reads on one open handle per file (a random reader: a
        # database, an index, mmap faults), files evicted again; only the
        # pread is timed. spillway restores the first read's chunk, then
        # reads the blocks asked for directly (direct_reads).
        for kind in ("spillway", "plain"):
            xs = []
            fds = [os.open(p, os.O_RDONLY) for p in fresh(kind)]
            try:
                for fd in fds:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for r in range(4):
                    for fd in fds:
                        off = rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096
                        t0 = time.perf_counter()
                        b = os.pread(fd, 4 * KiB, off)
                        xs.append(time.perf_counter() - t0)
                        assert len(b) == 4 * KiB
            finally:
                for fd in fds:
                    os.close(fd)
            out[("random 4k, open", kind)] = xs
        out["stats"] = m.stats()
    finally:
        m.close()
    # the same first bytes with restore=open, the default: the open queues
    # the whole file for the workers, the read comes right after it
    m = Mount(binary, a.cold, "restore=open")
    try:
        for i, n in enumerate(names):
            write_file(m.path(n), a.file_size, i)
        for case, olist in (("offset 0", [0] * len(names)), ("random offset", offs)):
            for n in names:
                evict(m.path(n))
            drop_caches()
            out[(case + ", open", "spillway")] = [timed_read(m.path(n), off)
                                                  for n, off in zip(names, olist)]
            out[(case + ", open", "plain")] = out[(case, "plain")]
    finally:
        m.close()
    return out


class S3rver:
    """tests/s3/s3rver.js on a free port, objects under root; stdin is its
    lifeline (it exits when the pipe closes)."""

    def __init__(self, root):
        self.dir = tempfile.mkdtemp(prefix="fib-s3-", dir=root)
        self.log = tempfile.mktemp(prefix="fib-s3log-")
        self.proc = subprocess.Popen(
            ["node", S3RVER_JS, "--dir", self.dir, "--port", "0", "--bucket", BUCKET,
             "--access-key", KEY_ID, "--secret-key", SECRET],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "w"))
        line = self.proc.stdout.readline().decode()
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError("s3rver: %r" % line)
        self.port = int(line.split()[1])
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.conn = None

    def objects(self):
        """Keys of the stored objects under BUCKET, with their sizes."""
        root, out = os.path.join(self.dir, BUCKET), {}
        for d, _, names in os.walk(root):
            for n in names:
                if n.endswith("._S3rver_object"):
                    p = os.path.join(d, n)
                    out[os.path.relpath(p, root)[:-len("._S3rver_object")]] = os.stat(p).st_size
        return out

    def ranged_get(self, key, off, n):
        """One signed GET of bytes [off, off + n) of key on a kept-alive
        connection: (seconds, body)."""
        path = "/%s/%s" % (BUCKET, urllib.parse.quote(key))
        host = "127.0.0.1:%d" % self.port
        rng = "bytes=%d-%d" % (off, off + n - 1)
        now = datetime.datetime.now(datetime.timezone.utc)
        amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        ph = hashlib.sha256(b"").hexdigest()
        sh = "host;range;x-amz-content-sha256;x-amz-date"
        creq = "GET\n%s\n\nhost:%s\nrange:%s\nx-amz-content-sha256:%s\nx-amz-date:%s\n\n%s\n%s" % (
            path, host, rng, ph, amz, sh, ph)
        scope = "%s/us-east-1/s3/aws4_request" % day
        sts = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz, scope,
                                                hashlib.sha256(creq.encode()).hexdigest())
        k = ("AWS4" + SECRET).encode()
        for part in (day, "us-east-1", "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        hdr = {"Host": host, "Range": rng, "x-amz-content-sha256": ph, "x-amz-date": amz,
               "Authorization": "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
                                "Signature=%s" % (KEY_ID, scope, sh, sig)}
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.conn.connect()
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers=hdr)
        r = self.conn.getresponse()
        body = r.read()
        dt = time.perf_counter() - t0
        if r.status != 206 or len(body) != n:
            raise RuntimeError("ranged GET: %d, %d bytes: %r" % (r.status, len(body), body[:200]))
        return dt, body

    def stop(self):
        if self.conn is not None:
            self.conn.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.unlink(self.log)
        except OSError:
            pass


def s3_first_byte(binary, a, srv):
    """First byte of files evicted to S3 (restore=lazy), at offset 0 and at
    a random offset, and one 4 KiB ranged GET of a segment object, each
    with caches dropped: {case: [seconds]}."""
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = KEY_ID, SECRET
    m = Mount(binary, a.cold, "restore=lazy", s3=srv)
    out = {}
    try:
        names = ["s%03d" % i for i in range(a.files)]
        for i, n in enumerate(names):
            write_file(m.path(n), a.file_size, 1000 + i)
        rng = random.Random(11)
        offs = [rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096 for _ in names]
        for case, olist, idle in (("s3 offset 0", [0] * len(names), False),
                                  ("s3 random offset", offs, False),
                                  ("s3 random, idle", offs[::-1], True)):
            for n in names:
                evict(m.path(n))
            drop_caches()
            xs = []
            for n, off in zip(names, olist):
                xs.append(timed_read(m.path(n), off))
                # idle: the next read starts once this chunk's rest is in
                # (one request on an idle server, as the ranged GET below)
                while idle and b"restoring=0" not in os.getxattr(m.path(n),
                                                                 "user.spillway.state"):
                    time.sleep(0.002)
            out[case] = xs
        segs = [(k, sz) for k, sz in srv.objects().items() if k.endswith(".spw")]
        xs = []
        if srv.conn is not None:  # the server closes idle connections
            srv.conn.close()
            srv.conn = None
        srv.ranged_get(segs[0][0], 0, 4 * KiB)  # the connection, as the daemon's are open
        drop_caches()  # once per batch, as for the reads through the mount
        for i in range(len(names)):
            k, sz = segs[i % len(segs)]
            off = rng.randrange(4096, sz - 8 * KiB) // 4096 * 4096
            xs.append(srv.ranged_get(k, off, 4 * KiB)[0])
        out["s3 ranged GET"] = xs
        out["stats"] = m.stats()
    finally:
        m.close()
    return out


def fio_read(path, size):
    r = subprocess.run(["fio", "--name=seq", "--filename=" + path, "--rw=read", "--bs=1M",
                        "--size=%d" % size, "--ioengine=io_uring", "--direct=1",
                        "--iodepth=8", "--output-format=json"],
                       capture_output=True, text=True, timeout=600)
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["read"]
    return size / MiB / (job["runtime"] / 1000.0)


def sequential(binary, a, plain_dir):
    m = Mount(binary, a.cold, "restore=open")
    try:
        p = m.path("seq")
        write_file(p, a.seq_size, 99)
        pid = m.proc.pid
        c0 = cpu_s(pid)
        evict(p)
        c1 = cpu_s(pid)
        drop_caches()
        t0 = time.perf_counter()
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            got = 0
            while True:
                b = os.read(fd, MiB)
                if not b:
                    break
                got += len(b)
        finally:
            os.close(fd)
        dt = time.perf_counter() - t0
        c2 = cpu_s(pid)
        assert got == a.seq_size
        gib = a.seq_size / (1 << 30)
        st = m.stats()
        return {"mount_MiBps": a.seq_size / MiB / dt, "cpu_spill_s_per_GiB": (c1 - c0) / gib,
                "cpu_restore_s_per_GiB": (c2 - c1) / gib, "stats": st}
    finally:
        m.close()


def run_build(binary, a, plain_dir, fio_mibps, srv):
    fb = first_byte(binary, a, plain_dir)
    sq = sequential(binary, a, plain_dir)
    rows = []
    for case in ("offset 0", "random offset", "offset 0, open", "random offset, open",
                 "random 4k", "random 4k, open"):
        s, p = fb[(case, "spillway")], fb[(case, "plain")]
        rows.append((case, pct(s, 50) * 1e3, pct(s, 99) * 1e3, pct(p, 50) * 1e3,
                     pct(p, 99) * 1e3))
    s3rows, s3lat = [], None
    if srv is not None:
        s3 = s3_first_byte(binary, a, srv)
        g = s3["s3 ranged GET"]
        for case in ("s3 offset 0", "s3 random offset", "s3 random, idle"):
            s = s3[case]
            s3rows.append((case, pct(s, 50) * 1e3, pct(s, 99) * 1e3, pct(g, 50) * 1e3,
                           pct(g, 99) * 1e3))
        s3lat = s3["stats"].get("latency", {}).get("first_byte", {}).get("s3")
    return {"rows": rows, "seq": sq, "fio": fio_mibps, "lat": fb["stats"].get("latency"),
            "s3rows": s3rows, "s3lat": s3lat}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--base", help="an older build to compare with")
    ap.add_argument("--cold", default="/var/tmp")
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--file-size", type=parse_size, default=16 * MiB)
    ap.add_argument("--seq-size", type=parse_size, default=1 << 30)
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 first byte")
    ap.add_argument("--spillway-opts", default="",
                    help="more -o options for every mount (e.g. extents=on)")
    a = ap.parse_args()
    global EXTRA_OPTS
    EXTRA_OPTS = a.spillway_opts
    plain_dir = tempfile.mkdtemp(prefix="fib-plain-", dir=a.cold)
    srv = None
    if not a.no_s3:
        if shutil.which("node") and os.path.isdir(
                os.path.join(REPO, "tests", "s3", "node_modules", "@20minutes")):
            srv = S3rver(a.cold)
        else:
            print("no node or tests/s3/node_modules: S3 first byte skipped", file=sys.stderr)
    try:
        fpath = os.path.join(plain_dir, "fio.dat")
        write_file(fpath, a.seq_size, 5, sync=True)
        fio = fio_read(fpath, a.seq_size)
        os.unlink(fpath)
        builds = [("after", a.build)] + ([("before", a.base)] if a.base else [])
        res = {}
        for name, b in builds:
            res[name] = run_build(os.path.join(b, "spillway"), a, plain_dir, fio, srv)
        print("\n%d files of %d MiB, 4 KiB reads, ms (p50 / p99); plain = same files on %s"
              % (a.files, a.file_size // MiB, a.cold))
        for name, r in res.items():
            print("[%s]" % name)
            for case, s50, s99, p50, p99 in r["rows"]:
                print("  %-19s spillway %7.2f / %7.2f   plain %6.2f / %6.2f   ratio p50 %.2fx"
                      " p99 %.2fx" % (case, s50, s99, p50, p99, s50 / p50, s99 / p99))
            sq = r["seq"]
            print("  sequential     mount %.0f MiB/s  fio %.0f MiB/s  ratio %.2fx"
                  % (sq["mount_MiBps"], r["fio"], sq["mount_MiBps"] / r["fio"]))
            print("  cpu            %.2f s/GiB spilled, %.2f s/GiB restored"
                  % (sq["cpu_spill_s_per_GiB"], sq["cpu_restore_s_per_GiB"]))
            for case, s50, s99, g50, g99 in r["s3rows"]:
                print("  %-16s spillway %7.2f / %7.2f   ranged GET %6.2f / %6.2f   ratio p50 %.2fx"
                      " p99 %.2fx" % (case, s50, s99, g50, g99, s50 / g50, s99 / g99))
            if r["lat"]:
                print("  daemon latency %s" % json.dumps(r["lat"]))
            if r["s3lat"]:
                print("  daemon s3 first byte %s" % json.dumps(r["s3lat"]))
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(plain_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
