"""
lib.s3 - the S3 side of the integration tests: S3Server (tests/s3/s3rver.js
on a free port, objects in a fresh temp dir), Proxy (s3proxy.py in front of
it, faults off until configured), credentials files, and S3Case (TierCase
with a server, its AWS environment restored at cleanup, and s3_mount).
Needs node and `npm ci` in tests/s3; without them S3Case skips with a reason.
"""

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

import harness
from lib.tier import TierCase

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/integration
REPO = os.path.dirname(os.path.dirname(HERE))
S3RVER_JS = os.path.join(REPO, "tests", "s3", "s3rver.js")
S3PROXY_PY = os.path.join(HERE, "s3proxy.py")
BUCKET = "spw-test"
OBJ_SUFFIX = "._S3rver_object"  # how s3rver's filesystem store names object data
START_DEADLINE = 20.0  # seconds for s3rver / the proxy to say "ready"
AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_DEFAULT_REGION", "AWS_REGION")


def _node_missing():
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(REPO, "tests", "s3", "node_modules", "@20minutes")):
        return "run `npm ci` in tests/s3 first"
    return None


# --------------------------------------------------------------------------
# helper processes: the S3 server and the fault proxy


class _Helper:
    """A helper process that prints "ready PORT", killed by pid on every exit
    path (stdin is a pipe: its lifeline). Registered with the harness, whose
    cleanup on signals and timeouts may reach it before the mounts: it stops
    the live mounts first, since their daemons talk to it while unmounting."""

    name = "helper"

    def __init__(self):
        self.proc = None
        self.port = None
        self.mnt = "(%s)" % self.name  # the harness prints this on cleanup errors
        self.log = None

    def _spawn(self, argv, log_path):
        self.log = log_path
        with harness._live_lock:
            harness._live.append(self)
        try:
            with open(log_path, "wb") as logf:
                self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=logf, preexec_fn=harness._pdeathsig,
                                             start_new_session=True)
            deadline = time.monotonic() + START_DEADLINE
            buf = b""
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s did not say ready within %.0fs: %s"
                                         % (self.name, START_DEADLINE, harness.log_tail(log_path)))
                r, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
                if r:
                    b = os.read(self.proc.stdout.fileno(), 4096)
                    if not b:
                        raise AssertionError("%s exited (status %s) before ready: %s"
                                             % (self.name, self.proc.wait(),
                                                harness.log_tail(log_path)))
                    buf += b
            m = re.match(rb"ready (\d+)", buf)
            if not m:
                raise AssertionError("%s said %r" % (self.name, buf))
            self.port = int(m.group(1))
        except BaseException:
            self.stop()
            raise
        return self

    def abort(self):
        pass  # mounts are killed first; this one is stopped by cleanup_all

    def stop(self):
        with harness._live_lock:
            mounts = [m for m in harness._live if isinstance(m, harness.Mount)]
        for m in mounts:
            m.stop()
        p = self.proc
        if p is not None and p.poll() is None:
            harness.kill_pid(p.pid, p)
            p.wait()
        if p is not None:
            for f in (p.stdin, p.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        with harness._live_lock:
            if self in harness._live:
                harness._live.remove(self)


class S3Server(_Helper):
    """tests/s3/s3rver.js on a free port, objects in a fresh temp dir."""

    name = "s3rver"

    def __init__(self, access_key="S3RVER", secret_key="S3RVER", buckets=(BUCKET,), tag="s3"):
        super().__init__()
        self.access_key = access_key
        self.secret_key = secret_key
        self.buckets = list(buckets)
        self.tag = tag
        self.dir = None

    def start(self):
        self.dir = harness.make_tmpdir()
        argv = ["node", S3RVER_JS, "--dir", self.dir, "--port", "0",
                "--access-key", self.access_key, "--secret-key", self.secret_key]
        for b in self.buckets:
            argv += ["--bucket", b]
        return self._spawn(argv, harness._log_path(self.tag))

    def stop(self):
        super().stop()
        if self.dir:
            harness.remove_tmpdir(self.dir)

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def objects(self, sub="", bucket=BUCKET):
        """{key: size} of the objects stored under bucket/sub."""
        root = os.path.join(self.dir, bucket)
        top = os.path.join(root, sub) if sub else root
        out = {}
        for d, _, names in os.walk(top):
            for n in names:
                if n.endswith(OBJ_SUFFIX):
                    p = os.path.join(d, n)
                    try:
                        out[os.path.relpath(p, root)[:-len(OBJ_SUFFIX)]] = os.stat(p).st_size
                    except FileNotFoundError:
                        pass
        return out


class Proxy(_Helper):
    """s3proxy.py in front of an S3Server; faults off until configure()."""

    name = "s3proxy"

    def __init__(self, upstream_port, seed=1, stall="0.2:1.0", tag="proxy"):
        super().__init__()
        self.upstream_port = upstream_port
        self.seed = seed
        self.stall = stall
        self.tag = tag

    def start(self):
        argv = [sys.executable, S3PROXY_PY, "--upstream", "127.0.0.1:%d" % self.upstream_port,
                "--rate", "0", "--seed", str(self.seed), "--stall", self.stall]
        return self._spawn(argv, harness._log_path(self.tag))

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def _ctl(self, what):
        with urllib.request.urlopen(self.endpoint + "/__s3proxy__/" + what, timeout=10) as r:
            return json.loads(r.read())

    def stats(self):
        return self._ctl("stats")

    def requests(self):
        return self._ctl("log")

    def configure(self, rate, kinds=None, match=None, budget=None):
        q = {"rate": "%g" % rate}
        if kinds is not None:
            q["kinds"] = ",".join(kinds)
        if match is not None:
            q["match"] = match
        if budget is not None:
            q["budget"] = str(budget)
        return self._ctl("config?" + urllib.parse.urlencode(q))


def free_port():
    """A port nobody listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def write_credentials(path, key, secret, mode=0o600, profile="default"):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                % (profile, key, secret))
    os.chmod(path, mode)
    return path


def classify(target):
    """Kind of S3 request from a proxy log target (path?query)."""
    keys = [kv.partition("=")[0] for kv in target.partition("?")[2].split("&")]
    if "uploads" in keys:
        return "initiate"
    if "partNumber" in keys:
        return "part"
    if "uploadId" in keys:
        return "complete_or_abort"
    return "object"


# --------------------------------------------------------------------------
# base class


class S3Case(TierCase):
    timeout = 120

    def setUp(self):
        why = _node_missing()
        if why:
            raise unittest.SkipTest(why)
        super().setUp()
        self._saved_env = {k: os.environ.get(k) for k in AWS_ENV}
        self.addCleanup(self._restore_env)

    def _restore_env(self):
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def set_aws_env(self, key, secret):
        """The daemon inherits os.environ (harness.Mount passes no env)."""
        for k in AWS_ENV:
            os.environ.pop(k, None)
        if key is not None:
            os.environ["AWS_ACCESS_KEY_ID"] = key
            os.environ["AWS_SECRET_ACCESS_KEY"] = secret

    def refused(self, opts, env=None, timeout=40):
        """Run spillway with opts; it must exit 1 without mounting. Returns stderr+stdout."""
        mnt = os.path.join(self.tmpdir(), "mnt")
        os.mkdir(mnt)
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        args = ["-f", "-o", "hot_dir=%s,hot_size=64M,%s" % (hot, opts), mnt]
        t0 = time.monotonic()
        rc, out, err, was_mounted = harness.run_spillway(args, mnt, timeout=timeout, env=env)
        dt = time.monotonic() - t0
        msg = (err + out).strip()
        self.assertIsNotNone(rc, "spillway did not exit within %ds: %s" % (timeout, msg))
        self.assertEqual(rc, 1, "exit status %s for %s: %s" % (rc, opts, msg))
        self.assertFalse(was_mounted, "%s was mounted with %s" % (mnt, opts))
        self.assertFalse(harness.is_mounted(mnt))
        self.assertFalse(os.path.exists(hot) and os.listdir(hot),
                         "hot_dir left with files: %s" % (os.path.exists(hot) and os.listdir(hot)))
        sys.stderr.write("\n  [refused %.1fs] %s\n" % (dt, msg))
        return msg

    def env(self, key, secret):
        e = {k: v for k, v in os.environ.items() if k not in AWS_ENV}
        if key is not None:
            e.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        return e

    def base(self, srv, **over):
        o = {"s3": "s3://%s/p" % BUCKET, "s3_endpoint": srv.endpoint, "s3_path_style": None,
             "state_dir": "none"}
        o.update(over)
        return ",".join(k if v is None else "%s=%s" % (k, v) for k, v in o.items())

    def one_line(self, msg, option):
        lines = [ln for ln in msg.splitlines() if "option '%s'" % option in ln]
        self.assertEqual(len(lines), 1, "expected one line naming option '%s':\n%s"
                         % (option, msg))
        return lines[0]

    def s3server(self, **kw):
        s = S3Server(**kw).start()
        self.addCleanup(s.stop)
        self.server = s
        self.set_aws_env(s.access_key, s.secret_key)
        return s

    def proxy(self, server, **kw):
        p = Proxy(server.port, **kw).start()
        self.addCleanup(p.stop)
        return p

    def s3_mount(self, server, endpoint=None, prefix="pfx", hot_size="64M", chunk_size="1M",
                 nvme=None, part_size="5M", tag="mnt", **opts):
        o = ["chunk_size=" + chunk_size, "s3=s3://%s/%s" % (BUCKET, prefix),
             "s3_endpoint=" + (endpoint or server.endpoint), "s3_path_style",
             "s3_part_size=" + part_size]
        if nvme:
            o.append("nvme=" + nvme)
        # these tests are about the volatile tier (objects gone at unmount);
        # test_durability_s3.py covers a state_dir with S3
        opts.setdefault("state_dir", "none")
        o += [k if v is None else "%s=%s" % (k, v) for k, v in opts.items()]
        self.cold = [nvme] if nvme else []
        self.m = self.mount(hot_size=hot_size, opts=o, tag=tag)
        self.mnt = self.m.mnt
        self.prefix = prefix
        s3dirs = [c["dir"] for c in self.stats()["cold"] if c["dir"].startswith("s3://")]
        self.assertEqual(len(s3dirs), 1, self.stats()["cold"])
        self.assertTrue(s3dirs[0].startswith("s3://%s/%s/" % (BUCKET, prefix)), s3dirs)
        self.uuid = s3dirs[0].rsplit("/", 1)[1]
        self.assertRegex(self.uuid, r"^[0-9a-f]{32}$")
        return self.m

    def seg_objects(self):
        """{seg-<16 hex>.spw: size} stored on the server for this mount."""
        objs = self.server.objects("%s/%s" % (self.prefix, self.uuid))
        out = {}
        for k, v in objs.items():
            n = k.rsplit("/", 1)[1]
            self.assertRegex(n, r"^seg-[0-9a-f]{16}\.spw$", "unexpected object %s" % k)
            out[n] = v
        return out

    def full_log(self, m):
        with open(m.log, errors="replace") as f:
            return f.read()
