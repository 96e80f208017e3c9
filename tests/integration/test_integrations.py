#!/usr/bin/env python3
"""
test_integrations - the examples in examples/integrations/ against real mounts.

* numpy_mmap.py on a mount with a 32 MiB hot tier and a cold directory: the
  arrays spill, come back through mmap, and every one verifies.
* The systemd mount unit and the README's fstab line: the unit passes
  `systemd-analyze verify` (or, without systemd, a configparser check), says
  the same as the fstab line, and the fstab line's options really mount
  through mount(8) (-t fuse.spillway and an fstab file given to mount -T).
* The Kubernetes and Ray manifests: parsed by a small block-YAML reader (no
  PyYAML here) and checked for what they must say (privileged, /dev/fuse,
  Bidirectional / HostToContainer propagation, hot tier on the node's
  /dev/shm, Ray's directory_path on the mount); `kubectl kustomize` parses
  them too when kubectl is installed. The DaemonSet's own spillway command
  line is mounted for real (paths swapped for temp dirs).
* Non-root: a throw-away user mounts spillway on a directory it owns (hot
  tier in the default /dev/shm/spillway-<uid>-<hash>, cold tier in its
  home), pushes a file 3.5x the hot tier through it, and unmounts with
  fusermount3 -u; the daemon runs as that uid and /proc/mounts says
  user_id=<uid>.

Run: python3 test_integrations.py --build BUILD_DIR [-k pattern]
"""

import configparser
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.tier import cold_read_bytes, cold_written_bytes  # noqa: E402

MiB = 1 << 20
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(TOP, "examples", "integrations")
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYS_PYTHON = "/usr/bin/python3"
FSTAB_ONLY = ("nofail", "auto", "noauto", "defaults", "_netdev", "user", "users", "nouser")


def example(name):
    return os.path.join(EXAMPLES, name)


def stats(mnt):
    return json.loads(os.getxattr(mnt, "user.spillway.stats"))


def run_to_file(argv, tmp, env=None, timeout=60, **kw):
    """Run a command whose children may daemonize: output goes to a file (a
    daemon could hold a pipe open forever). Returns (rc, output)."""
    path = os.path.join(tmp, "out-%s" % secrets.token_hex(4))
    with open(path, "wb") as f:
        rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env,
                            timeout=timeout, **kw).returncode
    with open(path, errors="replace") as f:
        return rc, "$ %s\n%s" % (" ".join(argv), f.read())


def replace_opts(opts, fn):
    """Apply fn(key, value) -> value (or None to drop) to a comma list."""
    out = []
    for o in opts.split(","):
        k, sep, v = o.partition("=")
        nv = fn(k, v if sep else None)
        if nv is False:
            continue
        out.append(k if nv is None else "%s=%s" % (k, nv))
    return ",".join(out)


# --------------------------------------------------------------------------
# a small reader for block-style YAML (the subset our manifests use):
# mappings, sequences ("- " items, also "- key: v"), plain / quoted scalars,
# | and > block scalars, JSON-compatible flow collections, comments, ---.
# Anything else is an error, never a guess.


class YamlError(ValueError):
    pass


_KEY = re.compile(r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\[\]{},:][^:#]*?)\s*:(?:\s+|$)""")


def _is_seq(text):
    return text == "-" or text.startswith("- ")


class _Yaml:
    def __init__(self, lines, first_lineno):
        self.lines = lines
        self.base = first_lineno
        self.i = 0

    def err(self, msg):
        raise YamlError("line %d: %s" % (self.base + self.i, msg))

    def peek(self):
        while self.i < len(self.lines):
            ln = self.lines[self.i]
            s = ln.strip()
            if s and not s.startswith("#"):
                lead = ln[:len(ln) - len(ln.lstrip())]
                if "\t" in lead:
                    self.err("tab in indentation")
                return len(lead), s
            self.i += 1
        return None

    def document(self):
        pk = self.peek()
        if pk is None:
            return None
        v = self.node(pk[0])
        if self.peek() is not None:
            self.err("unexpected content (bad indentation?)")
        return v

    def node(self, ind):
        return self.seq(ind) if _is_seq(self.peek()[1]) else self.mapping(ind)

    def child(self, ind):
        """The value of a key with nothing after the colon."""
        pk = self.peek()
        if pk is None:
            return None
        if pk[0] > ind:
            return self.node(pk[0])
        if pk[0] == ind and _is_seq(pk[1]):
            return self.seq(ind)  # "key:\n- a" (sequence at the key's indent)
        return None

    def seq(self, ind):
        out = []
        while True:
            pk = self.peek()
            if pk is None or pk[0] < ind or (pk[0] == ind and not _is_seq(pk[1])):
                return out
            if pk[0] > ind:
                self.err("bad indentation in a sequence")
            rest = pk[1][1:].lstrip()
            if not rest:
                self.i += 1
                out.append(self.child(ind + 1))
            elif _KEY.match(rest):
                col = ind + len(pk[1]) - len(rest)
                self.lines[self.i] = " " * col + rest  # "- k: v": a mapping at col
                out.append(self.mapping(col))
            else:
                self.i += 1
                out.append(self.scalar(rest, ind))

    def mapping(self, ind):
        out = {}
        while True:
            pk = self.peek()
            if pk is None or pk[0] < ind or (pk[0] == ind and _is_seq(pk[1])):
                return out
            if pk[0] > ind:
                self.err("bad indentation in a mapping")
            m = _KEY.match(pk[1])
            if not m:
                self.err("expected 'key:' in %r" % pk[1])
            key = self.unquote_key(m.group(1).strip())
            if key in out:
                self.err("duplicate key %r" % key)
            rest = pk[1][m.end():]
            self.i += 1
            out[key] = self.child(ind) if not rest.strip() or rest.lstrip().startswith("#") \
                else self.scalar(rest.strip(), ind)

    @staticmethod
    def unquote_key(k):
        if k[:1] == '"':
            return json.loads(k)
        if k[:1] == "'":
            return k[1:-1].replace("''", "'")
        return k

    def after(self, s, pos):
        tail = s[pos:].strip()
        if tail and not tail.startswith("#"):
            self.err("text after a quoted scalar: %r" % tail)

    def continuation(self, ind):
        """Following lines of a multi-line flow scalar (more indented than
        ind), as raw stripped lines ("" for an empty line)."""
        out = []
        while self.i < len(self.lines):
            ln = self.lines[self.i]
            if not ln.strip():
                out.append("")
                self.i += 1
                continue
            if len(ln) - len(ln.lstrip(" ")) <= ind:
                break
            out.append(ln.strip())
            self.i += 1
        while out and out[-1] == "":  # trailing empty lines belong to no one
            out.pop()
            self.i -= 1
        return out

    @staticmethod
    def fold(first, more, dq=False):
        """YAML line folding: a line break is a space, each empty line a
        newline; in double quotes a trailing backslash escapes the break."""
        text, empties = first.rstrip(), 0
        for ln in more:
            if not ln:
                empties += 1
                continue
            if dq and not empties and re.search(r"(?<!\\)(\\\\)*\\$", text):
                text = text[:-1] + ln  # escaped line break
            else:
                text += ("\n" * empties if empties else " ") + ln
            empties = 0
        return text

    def quoted(self, s, ind, pat):
        m = pat.match(s)
        if not m:
            start = self.i
            more = []
            while self.i < len(self.lines) and not m:
                ln = self.lines[self.i]
                if ln.strip() and len(ln) - len(ln.lstrip(" ")) <= ind:
                    break
                more.append(ln.strip())
                self.i += 1
                m = pat.match(self.fold(s, more, s[0] == '"'))
            if not m:
                self.i = start
                self.err("unterminated quoted scalar")
            s = self.fold(s, more, s[0] == '"')
        self.after(s, m.end())
        return m

    def scalar(self, s, ind):
        if s[0] in "|>":
            m = re.match(r"^([|>])([+-]?)\s*(#.*)?$", s)
            if not m:
                self.err("unsupported block scalar header %r" % s)
            return self.block(ind, m.group(1), m.group(2))
        if s[0] == '"':
            m = self.quoted(s, ind, re.compile(r'"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$', re.S))
            try:
                return json.loads('"%s"' % m.group(1), strict=False)
            except ValueError:
                self.err("unsupported escape in %r" % m.group(0))
        if s[0] == "'":
            m = self.quoted(s, ind, re.compile(r"'((?:[^']|'')*)'\s*(?:#.*)?$", re.S))
            return m.group(1).replace("''", "'")
        if s[0] in "[{":
            s = re.split(r"\s#", s, 1)[0].rstrip()
            try:
                return json.loads(s)
            except ValueError:
                self.err("flow collection that is not plain JSON: %r" % s)
        if s[0] in "&*!%@`":
            self.err("unsupported YAML feature: %r" % s)
        if re.search(r"\s#", s):
            s = re.split(r"\s#", s, 1)[0].rstrip()  # a comment ends the scalar
        else:
            more = self.continuation(ind)
            for ln in more:
                if ln.startswith("#") or _is_seq(ln) or _KEY.match(ln):
                    self.err("bad indentation (or a key inside a multi-line scalar)")
            s = self.fold(s, more)
        if s in ("true", "True", "TRUE"):
            return True
        if s in ("false", "False", "FALSE"):
            return False
        if s in ("null", "~", "Null", "NULL"):
            return None
        if re.fullmatch(r"[-+]?[0-9]+", s):
            return int(s)
        if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", s):
            return float(s)
        return s

    def block(self, ind, style, chomp):
        body = []
        bi = None
        while self.i < len(self.lines):
            ln = self.lines[self.i]
            if ln.strip():
                lead = len(ln) - len(ln.lstrip(" "))
                if lead <= ind:
                    break
                if bi is None:
                    bi = lead
                if lead < bi:
                    self.err("block scalar line less indented than its first line")
                body.append(ln[bi:])
            else:
                body.append("")
            self.i += 1
        while body and body[-1] == "":
            body.pop()
        if style == ">":
            text = re.sub(r"(?<!\n)\n(?!\n)", " ", "\n".join(body))
        else:
            text = "\n".join(body)
        return text if chomp == "-" or not text else text + "\n"


def yaml_load_all(text):
    docs, cur, start = [], [], 1
    for n, ln in enumerate(text.split("\n"), 1):
        if re.match(r"^---\s*(#.*)?$", ln):
            docs.append((start, cur))
            cur, start = [], n + 1
        else:
            cur.append(ln)
    docs.append((start, cur))
    out = []
    for start, lines in docs:
        v = _Yaml(lines, start).document()
        if v is not None:
            out.append(v)
    return out


def by_kind(docs, kind):
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]
    if len(found) != 1:
        raise AssertionError("expected one %s, found %d" % (kind, len(found)))
    return found[0]


def under(path, root):
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def rebase(path, old_root, new_root):
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(old_root))
    return os.path.normpath(os.path.join(new_root, rel))


class PodSpec:
    """Volumes and volumeMounts of one pod template, joined by name."""

    def __init__(self, spec, what):
        self.spec = spec
        self.what = what
        self.volumes = {v["name"]: v for v in spec.get("volumes") or []}

    def containers(self, init=False):
        return list(self.spec.get("initContainers") or []) if init else \
            list(self.spec["containers"])

    def host_mounts(self, c):
        """[(hostPath dict, volumeMount dict)] of container c."""
        out = []
        for vm in c.get("volumeMounts") or []:
            v = self.volumes.get(vm["name"])
            if v is None:
                raise AssertionError("%s: volumeMount %r has no volume" % (self.what, vm["name"]))
            if "hostPath" in v:
                out.append((v["hostPath"], vm))
        return out

    def mount_of_host(self, c, host_path, propagation):
        """The container path where host_path (or a parent) is mounted with
        the given propagation, mapped to host_path; AssertionError if none."""
        for hp, vm in self.host_mounts(c):
            if under(host_path, hp["path"]) and vm.get("mountPropagation") == propagation:
                return rebase(host_path, hp["path"], vm["mountPath"])
        raise AssertionError("%s: container %s does not mount host %s with "
                             "mountPropagation %s" % (self.what, c["name"], host_path,
                                                      propagation))


# --------------------------------------------------------------------------
# helpers for the examples


def numpy_python(test):
    """A python3 that can import numpy; installs python3-numpy if none can."""
    cands = [sys.executable, SYS_PYTHON]
    for py in cands:
        if py and os.access(py, os.X_OK) and subprocess.run(
                [py, "-c", "import numpy"], capture_output=True, timeout=60).returncode == 0:
            return py
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "python3-numpy"]
    r = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=600)
        r = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    if r.returncode != 0 or subprocess.run([SYS_PYTHON, "-c", "import numpy"],
                                           capture_output=True).returncode != 0:
        test.fail("numpy is needed and `apt-get install -y python3-numpy` failed (add "
                  "python3-numpy to tests/deps.sh):\n%s"
                  % (r.stdout + r.stderr).decode(errors="replace")[-2000:])
    return SYS_PYTHON


def installed_spillway():
    return shutil.which("spillway", path=STD_PATH)


def readme_fstab_line():
    """(source, mountpoint, fstype, options) of the one spillway fstab line
    in a code block of examples/integrations/README.md."""
    with open(example("README.md")) as f:
        text = f.read()
    found = []
    in_code = False
    for ln in text.split("\n"):
        if ln.strip().startswith("```"):
            in_code = not in_code
            continue
        indented = ln.startswith("    ")
        if not (in_code or indented):
            continue
        f = ln.split()
        if len(f) == 6 and f[2] == "fuse.spillway" and f[4:] == ["0", "0"]:
            found.append(tuple(f[:4]))
    if len(found) != 1:
        raise AssertionError("README.md: expected one fstab line of type fuse.spillway in a "
                             "code block, found %d: %r" % (len(found), found))
    return found[0]


def systemd_escape_path(path):
    exe = shutil.which("systemd-escape")
    if exe:
        r = subprocess.run([exe, "-p", "--suffix=mount", path], capture_output=True, text=True,
                           timeout=10)
        if r.returncode == 0:
            return r.stdout.strip()
    p = path.strip("/")
    out = []
    for i, ch in enumerate(p):
        if ch == "/":
            out.append("-")
        elif ch.isalnum() and ch.isascii() or ch in ":_" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.append("".join("\\x%02x" % b for b in ch.encode()))
    return ("".join(out) or "-") + ".mount"


# --------------------------------------------------------------------------
# a throw-away user

ACL_XATTR = "system.posix_acl_access"


def _acl_for_user(uid, owner_perm):
    """A POSIX ACL (xattr form): the owner keeps its rights, uid gets rw."""
    undef = 0xFFFFFFFF
    ents = [(0x01, owner_perm, undef), (0x02, 6, uid), (0x04, 0, undef), (0x10, 6, undef),
            (0x20, 0, undef)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ents)


class ThrowawayUser:
    """useradd -m with a random name; cleanup() kills what it left running
    (by pid), userdel -r, and undoes any /dev/fuse grant."""

    def __init__(self, test):
        self.test = test
        self.name = "spwt" + secrets.token_hex(4)
        self.notes = []
        self._fuse_restore = None
        r = subprocess.run(["useradd", "-m", "-s", "/bin/sh", self.name], capture_output=True,
                           timeout=30)
        test.assertEqual(r.returncode, 0, "useradd: %s" % r.stderr.decode(errors="replace"))
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid, self.home = pw.pw_uid, pw.pw_gid, pw.pw_dir
        self.mnt = self.home  # for harness messages
        self.done = False
        test.addCleanup(self.cleanup)
        # also cleaned up by harness.cleanup_all (fatal signal, watchdog)
        with harness._live_lock:
            harness._live.append(self)

    def run(self, argv, **kw):
        """runuser -u USER -- argv, from / (root's cwd may be closed to it)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(["runuser", "-u", self.name, "--"] + list(argv), cwd="/",
                              stdin=subprocess.DEVNULL, **kw)

    def can_open_fuse(self):
        code = "import os; os.close(os.open('/dev/fuse', os.O_RDWR))"
        return self.run([SYS_PYTHON, "-c", code]).returncode == 0

    def ensure_fuse_access(self):
        """Debian's udev makes /dev/fuse 0666; machines without udev (VMs,
        containers) may leave it 0600, and then libfuse fails with 'failed to
        open /dev/fuse: Permission denied' instead of falling back to
        fusermount3. Grant rw to this uid only (POSIX ACL), undone at cleanup."""
        if self.can_open_fuse():
            return
        st = os.stat("/dev/fuse")
        try:
            old_acl = os.getxattr("/dev/fuse", ACL_XATTR)
        except OSError:
            old_acl = None
        self._fuse_restore = (stat.S_IMODE(st.st_mode), old_acl)
        note = ("/dev/fuse is %s (mode %o): user %s cannot open it; granted rw to uid %d by "
                "ACL for this test" % (stat.filemode(st.st_mode), stat.S_IMODE(st.st_mode),
                                       self.name, self.uid))
        self.notes.append(note)
        sys.stderr.write("[note] %s\n" % note)
        try:
            os.setxattr("/dev/fuse", ACL_XATTR, _acl_for_user(self.uid, (st.st_mode >> 6) & 7))
        except OSError as e:
            self.test.fail("/dev/fuse is mode %o and not accessible to other users, and a "
                           "POSIX ACL cannot be set on it (%s): non-root mounts are impossible "
                           "on this machine without `chmod 0666 /dev/fuse`"
                           % (stat.S_IMODE(st.st_mode), e))
        self.test.assertTrue(self.can_open_fuse(), "still cannot open /dev/fuse after the ACL")

    def _undo_fuse(self):
        if self._fuse_restore is None:
            return
        mode, old_acl = self._fuse_restore
        self._fuse_restore = None
        if old_acl is not None:
            os.setxattr("/dev/fuse", ACL_XATTR, old_acl)
        else:
            try:
                os.removexattr("/dev/fuse", ACL_XATTR)
            except OSError:
                pass
        os.chmod("/dev/fuse", mode)

    def pids(self):
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/status" % d) as f:
                    for ln in f:
                        if ln.startswith("Uid:"):
                            if int(ln.split()[2]) == self.uid and harness._pid_alive(int(d)):
                                out.append(int(d))
                            break
            except OSError:
                pass
        return out

    def abort(self):
        """Watchdog: kill the user's processes so stuck FUSE requests fail."""
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def stop(self):
        self.cleanup()

    def cleanup(self):
        if self.done:
            return
        self.done = True
        with harness._live_lock:
            if self in harness._live:
                harness._live.remove(self)
        problems = []
        try:
            self._undo_fuse()
        except OSError as e:
            problems.append("cannot restore /dev/fuse: %s" % e)
        with open("/proc/mounts") as f:
            mine = [harness._unescape_mount_field(ln.split()[1]) for ln in f
                    if "user_id=%d," % self.uid in ln]
        for m in mine:
            how = harness.force_unmount(m)
            if how.startswith("FAILED"):
                problems.append("%s: %s" % (m, how))
        for pid in self.pids():
            harness.kill_pid(pid)
        for d in os.listdir("/dev/shm"):
            if d.startswith("spillway-%d-" % self.uid):
                shutil.rmtree(os.path.join("/dev/shm", d), ignore_errors=True)
        r = subprocess.run(["userdel", "-r", self.name], capture_output=True, timeout=30)
        if r.returncode not in (0, 12):  # 12: home/mail spool not found
            r = subprocess.run(["userdel", "-f", "-r", self.name], capture_output=True,
                               timeout=30)
        try:
            pwd.getpwnam(self.name)
            problems.append("userdel %s failed: %s" % (self.name,
                                                       r.stderr.decode(errors="replace")))
        except KeyError:
            pass
        if os.path.exists(self.home):
            shutil.rmtree(self.home, ignore_errors=True)
        if problems:
            raise AssertionError("cleanup of user %s: %s" % (self.name, "; ".join(problems)))


def proc_uids(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("Uid:"):
                return [int(x) for x in ln.split()[1:]]
    return []


USER_IO = r"""
import hashlib, json, os, sys
mnt, size = sys.argv[1], int(sys.argv[2])
path = os.path.join(mnt, "big")
def block(i):
    return hashlib.sha256(b"%d" % i).digest() * (1 << 15)  # 1 MiB, different per i
h = hashlib.sha256()
with open(path, "wb") as f:
    for i in range(size >> 20):
        b = block(i)
        f.write(b)
        h.update(b)
    f.flush()
    os.fsync(f.fileno())
after_write = json.loads(os.getxattr(mnt, "user.spillway.stats"))
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
h2 = hashlib.sha256()
n = 0
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    h2.update(b)
    n += len(b)
os.close(fd)
st = os.stat(path)
print(json.dumps({"read": n, "size": st.st_size, "owner": st.st_uid,
                  "match": h.hexdigest() == h2.hexdigest(), "after_write": after_write,
                  "after_read": json.loads(os.getxattr(mnt, "user.spillway.stats"))}))
"""


# --------------------------------------------------------------------------
# the tests


class TestNumpy(SpwTestCase):
    timeout = 900  # may include apt-get install python3-numpy

    def test_numpy_mmap_spill_and_restore(self):
        py = numpy_python(self)
        cold = self.tmpdir()
        m = self.mount(hot_size="32M", opts=["nvme=" + cold, "min_spill_size=16M"],
                       tag="numpy")
        r = subprocess.run([py, example("numpy_mmap.py"), m.mnt, "128M", "--array-size", "16M"],
                           capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        oks = re.findall(r"^ok +array_\d+\.npy", out, re.M)
        self.assertEqual(len(oks), 8, out)
        self.assertNotIn("FAIL", out)
        self.assertIn("all 8 arrays verified", out)
        self.assertRegex(out, r"write: 128 MiB in [0-9.]+s \([0-9]+ MiB/s")
        self.assertRegex(out, r"mmap read: 128 MiB faulted in")
        st = stats(m.mnt)
        # 128 MiB through a 32 MiB hot tier: at least 96 MiB went cold, and
        # mapping the arrays back had to read what was dropped
        self.assertGreaterEqual(cold_written_bytes(st), 96 * MiB, st)
        self.assertGreater(cold_read_bytes(st), 0, st)
        self.assertEqual(st["errors"], {"io": 0, "crc": 0}, st)
        self.assertLessEqual(st["hot"]["used"], 32 * MiB, st)
        self.assertRegex(out, r"spillway: hot \d+/32 MiB, spilled \d+ MiB, restored \d+ MiB")
        self.assertEqual(os.listdir(m.mnt), [], "numpy_mmap.py left files behind")


class TestSystemdAndFstab(SpwTestCase):
    timeout = 120

    def unit(self):
        cp = configparser.ConfigParser(interpolation=None, strict=True,
                                       empty_lines_in_values=False)
        cp.optionxform = str  # systemd keys are case-sensitive
        with open(example("spillway.mount")) as f:
            cp.read_file(f)
        return cp

    def test_unit_matches_fstab_line(self):
        src, where, fstype, opts = readme_fstab_line()
        cp = self.unit()
        self.assertEqual(set(cp.sections()), {"Unit", "Mount", "Install"})
        mnt = cp["Mount"]
        self.assertEqual(mnt["What"], src)
        self.assertEqual(mnt["Where"], where)
        self.assertEqual(mnt["Type"], fstype)
        self.assertEqual(fstype, "fuse.spillway")
        fstab_opts = [o for o in opts.split(",")
                      if o not in FSTAB_ONLY and not o.startswith("x-systemd.")]
        self.assertEqual(mnt["Options"].split(","), fstab_opts,
                         "the unit's Options= and the README's fstab line disagree")
        self.assertTrue(os.path.isabs(where))
        self.assertIn("hot_size=", mnt["Options"])
        self.assertIn("nvme=", mnt["Options"])

    def test_systemd_analyze_verify(self):
        cp = self.unit()
        exe = shutil.which("systemd-analyze")
        if not exe:
            self.skipTest("systemd-analyze is not installed; test_unit_matches_fstab_line "
                          "checked the unit with configparser only")
        where = cp["Mount"]["Where"]
        name = systemd_escape_path(where)
        d = self.tmpdir()
        path = os.path.join(d, name)
        shutil.copy(example("spillway.mount"), path)
        r = subprocess.run([exe, "verify", "--man=no", path], capture_output=True, text=True,
                           timeout=60)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        complaints = [ln for ln in out.splitlines() if name in ln]
        self.assertEqual(complaints, [], out)
        # the check is not a no-op: under a name that does not match Where=
        # (the file's name in the repo) systemd refuses the unit
        bad = os.path.join(d, "spillway.mount")
        shutil.copy(example("spillway.mount"), bad)
        r = subprocess.run([exe, "verify", "--man=no", bad], capture_output=True, text=True,
                           timeout=60)
        if where != "/spillway":
            self.assertNotEqual(r.returncode, 0, "verify accepted a misnamed unit:\n%s"
                                % (r.stdout + r.stderr))

    def _swap_paths(self, opts, tmp):
        """The fstab options with every path swapped for a fresh temp dir and
        hot_size made small; returns (options, hot_dir, cold_dirs)."""
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        colds = []

        def fn(k, v):
            if k == "hot_dir":
                return hot
            if k == "hot_size":
                return "64M"
            if k == "nvme":
                out = []
                for _ in v.split(":"):
                    c = os.path.join(tmp, "cold%d" % len(colds))
                    os.mkdir(c)
                    colds.append(c)
                    out.append(c)
                return ":".join(out)
            if k.startswith("x-systemd.requires-mounts-for") or (v or "").startswith("/"):
                return tmp
            return v

        new = replace_opts(opts, fn)
        if "hot_dir=" not in new:
            new += ",hot_dir=" + hot
        return new, hot, colds

    def _check_and_umount(self, mnt, hot, colds, sp):
        entry = harness.mount_entry(mnt)
        self.assertIsNotNone(entry, "mount(8) returned 0 but nothing is mounted")
        sp.pids.extend(harness.find_daemon_pids(mnt))
        self.assertTrue(entry[2].startswith("fuse"), entry)
        data = os.urandom(3 * MiB + 5)
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(data)
        with open(os.path.join(mnt, "f"), "rb") as f:
            self.assertEqual(f.read(), data)
        st = stats(mnt)
        self.assertEqual(st["hot"]["limit"], 64 * MiB, st)
        self.assertEqual(sorted(c["dir"] for c in st["cold"]), sorted(colds),
                         "the nvme= option did not reach the daemon: %s" % st)
        self.assertEqual(stat.S_IMODE(os.stat(hot).st_mode), 0o700)
        pids = harness.find_daemon_pids(mnt)
        self.assertEqual(len(pids), 1, pids)
        r = subprocess.run(["umount", mnt], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        harness.wait_until(lambda: not harness._pid_alive(pids[0]), harness.EXIT_DEADLINE,
                           "the daemon to exit after umount")
        self.assertFalse(harness.is_mounted(mnt))
        return entry

    def _mount_cmd(self):
        """How mount(8) can reach spillway here: (-t type, source word)."""
        if installed_spillway():
            return "fuse.spillway", "spillway"
        # not installed: mount(8) clears PATH for helpers, so name the program
        sys.stderr.write("[note] spillway is not installed in %s: mounting with "
                         "-t fuse %s#spillway instead of -t fuse.spillway\n"
                         % (STD_PATH, harness.SPILLWAY))
        return "fuse", harness.SPILLWAY + "#spillway"

    def test_fstab_options_mount(self):
        """mount -t fuse.spillway spillway MNT -o <the README line's options>."""
        src, where, fstype, opts = readme_fstab_line()
        tmp = self.tmpdir()
        mnt = self.tmpdir()
        new, hot, colds = self._swap_paths(opts, tmp)
        self.assertEqual(new.count(","), opts.count(","), (opts, new))
        t, source = self._mount_cmd()
        sp = harness.Spawned(mnt)
        self.addCleanup(sp.stop)
        rc, out = run_to_file(["mount", "-t", t, source, mnt, "-o", new], tmp)
        self.assertEqual(rc, 0, out)
        entry = self._check_and_umount(mnt, hot, colds, sp)
        if t == "fuse.spillway":
            self.assertEqual(entry[:3], ["spillway", mnt, "fuse.spillway"])

    def test_fstab_file_mount(self):
        """The README's fstab line itself (paths swapped) in an fstab file
        given to mount -T: `mount MNT` works from it."""
        src, where, fstype, opts = readme_fstab_line()
        tmp = self.tmpdir()
        mnt = self.tmpdir()
        new, hot, colds = self._swap_paths(opts, tmp)
        t, source = self._mount_cmd()
        if t != fstype:
            src, fstype = source, t
        fstab = os.path.join(tmp, "fstab")
        with open(fstab, "w") as f:
            f.write("# test_integrations\n%s  %s  %s  %s  0  0\n" % (src, mnt, fstype, new))
        sp = harness.Spawned(mnt)
        self.addCleanup(sp.stop)
        rc, out = run_to_file(["mount", "-T", fstab, mnt], tmp)
        self.assertEqual(rc, 0, out)
        self._check_and_umount(mnt, hot, colds, sp)


class TestManifests(SpwTestCase):
    timeout = 120

    def load(self, name):
        with open(example(name)) as f:
            return f.read()

    def test_yaml_reader_rejects(self):
        """The YAML reader is strict: what it cannot read is an error."""
        for bad in ("a: 1\n  b: 2\n", "a:\n\t- x\n", "a: &x 1\n", "- a\nb: 1\n", "a: 1\na: 2\n",
                    "a: 'x\n", "a: {b: c}\n", "a: b\n  # c\n  d\n", "a: [1,\n"):
            with self.subTest(bad=bad):
                with self.assertRaises(YamlError):
                    yaml_load_all(bad)
        self.assertEqual(yaml_load_all("a:\n- x\n- y: 1\n  z: '2'\nb: |\n  l1\n   l2\nc: true\n"),
                         [{"a": ["x", {"y": 1, "z": "2"}], "b": "l1\n l2\n", "c": True}])
        # multi-line flow scalars, as kubectl/go-yaml writes long strings
        self.assertEqual(yaml_load_all("- a b\n  c\n- 'x ''y''\n\n  z'\n- \"p\\\n  q r\"\n"
                                       "---\nk: v # c\n"),
                         [["a b c", "x 'y'\nz", "pq r"], {"k": "v"}])

    def test_kubectl_parses_them(self):
        """A real YAML parser (kustomize inside kubectl, offline) reads the
        manifests and agrees with our reader."""
        exe = shutil.which("kubectl")
        if not exe:
            self.skipTest("kubectl is not installed: the manifests are checked by the "
                          "built-in block-YAML reader only")
        for name in ("k8s-daemonset.yaml", "raycluster.yaml"):
            with self.subTest(name=name):
                d = self.tmpdir()
                shutil.copy(example(name), os.path.join(d, name))
                with open(os.path.join(d, "kustomization.yaml"), "w") as f:
                    f.write("resources:\n- %s\n" % name)
                r = subprocess.run([exe, "kustomize", d], capture_output=True, text=True,
                                   timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                ours = yaml_load_all(self.load(name))
                theirs = yaml_load_all(r.stdout)

                def key(doc):
                    return (doc["kind"], doc["metadata"]["name"])

                self.assertEqual(sorted(ours, key=key), sorted(theirs, key=key))

    def daemonset(self):
        docs = yaml_load_all(self.load("k8s-daemonset.yaml"))
        ds = by_kind(docs, "DaemonSet")
        self.assertEqual(ds["apiVersion"], "apps/v1")
        pod = PodSpec(ds["spec"]["template"]["spec"], "DaemonSet")
        labels = ds["spec"]["template"]["metadata"]["labels"]
        for k, v in ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v, "selector does not match the template")
        (c,) = pod.containers()
        return docs, ds, pod, c

    def spillway_cmdline(self, c):
        """argv of the `exec spillway ...` line of the DaemonSet's script."""
        cmd = list(c.get("command") or []) + list(c.get("args") or [])
        self.assertEqual(cmd[:2], ["/bin/sh", "-c"])
        lines = [ln.strip() for ln in cmd[2].splitlines() if re.match(r"\s*exec spillway ",
                                                                      ln)]
        self.assertEqual(len(lines), 1, cmd[2])
        argv = shlex.split(lines[0])[1:]
        self.assertIn("-f", argv, "spillway must stay in the foreground: it is the container")
        opts = argv[argv.index("-o") + 1]
        return argv, opts, argv[-1]

    def test_daemonset(self):
        docs, ds, pod, c = self.daemonset()
        text = self.load("k8s-daemonset.yaml")
        for must in ("mountPropagation: Bidirectional", "/dev/fuse", "privileged: true",
                     "mountPropagation: HostToContainer"):
            self.assertIn(must, text)
        self.assertIs(c["securityContext"]["privileged"], True)
        self.assertEqual(ds["spec"]["template"]["spec"]["tolerations"], [{"operator": "Exists"}])
        mounts = pod.host_mounts(c)
        fuse = [(hp, vm) for hp, vm in mounts if hp["path"] == "/dev/fuse"]
        self.assertEqual(len(fuse), 1, mounts)
        self.assertEqual(fuse[0][0].get("type"), "CharDevice")
        self.assertEqual(fuse[0][1]["mountPath"], "/dev/fuse")
        argv, opts, mnt = self.spillway_cmdline(c)
        kv = dict(o.partition("=")[::2] for o in opts.split(","))
        # the mountpoint is inside the Bidirectional hostPath volume
        bidi = [(hp, vm) for hp, vm in mounts if vm.get("mountPropagation") == "Bidirectional"]
        self.assertEqual(len(bidi), 1, mounts)
        self.assertTrue(under(mnt, bidi[0][1]["mountPath"]), (mnt, bidi))
        self.assertNotEqual(os.path.normpath(mnt), os.path.normpath(bidi[0][1]["mountPath"]),
                            "mount below the hostPath, so a dead mount can be detached")
        self.assertIn("umount -l %s" % mnt, c["command"][2])
        # hot tier on the node's /dev/shm, cold tier on another hostPath
        shm = [vm["mountPath"] for hp, vm in mounts if hp["path"] == "/dev/shm"]
        self.assertEqual(len(shm), 1, mounts)
        self.assertTrue(under(kv["hot_dir"], shm[0]) and kv["hot_dir"] != shm[0], kv)
        self.assertIn("nvme", kv)
        for cold in kv["nvme"].split(":"):
            hosts = [hp["path"] for hp, vm in mounts if under(cold, vm["mountPath"])]
            self.assertEqual(len(hosts), 1, "nvme dir %s is not on a hostPath" % cold)
            self.assertNotEqual(hosts[0], "/dev/shm")
        # other users' pods may use it; postStart opens the root to them
        self.assertIn("allow_other", kv)
        self.assertIn("default_permissions", kv)
        self.assertIn("chmod 1777 %s" % mnt,
                      " ".join(c["lifecycle"]["postStart"]["exec"]["command"]))
        # memory limit covers the hot tier (tmpfs pages are charged to it)
        lim = c["resources"]["limits"]["memory"]
        self.assertRegex(lim, r"^[0-9]+Gi$")
        self.assertGreater(int(lim[:-2]), int(kv["hot_size"].rstrip("G")), (lim, kv))
        # the consumer pod sees the node's mount through HostToContainer
        host_mnt = rebase(mnt, bidi[0][1]["mountPath"], bidi[0][0]["path"])
        cpod = by_kind(docs, "Pod")
        cps = PodSpec(cpod["spec"], "Pod")
        for ctr in cps.containers() + cps.containers(init=True):
            inside = cps.mount_of_host(ctr, host_mnt, "HostToContainer")
            self.assertIn(inside, " ".join(ctr["command"]), ctr)
            self.assertNotIn("securityContext", ctr, "the consumer needs no privileges")

    def test_daemonset_command_mounts(self):
        """The DaemonSet's spillway options mount for real (paths swapped for
        temp dirs, hot_size made small), and its postStart chmod 1777 lets
        another user create files through allow_other."""
        docs, ds, pod, c = self.daemonset()
        argv, opts, mnt = self.spillway_cmdline(c)
        cold = self.tmpdir()
        extra = replace_opts(opts, lambda k, v: False if k in ("hot_dir", "hot_size") else
                             (cold if k == "nvme" else v))
        m = self.mount(hot_size="64M", opts=extra.split(","), tag="daemonset")
        os.chmod(m.base, 0o755)
        os.chmod(m.mnt, 0o1777)  # what postStart does
        self.assertEqual(stat.S_IMODE(os.stat(m.mnt).st_mode), 0o1777)
        code = ("import os; p = %r\nwith open(p, 'wb') as f: f.write(b'x' * 5000000)\n"
                "print(os.stat(p).st_uid, len(open(p, 'rb').read()))" % m.path("byuser"))
        r = subprocess.run([SYS_PYTHON, "-c", code], user=65534, group=65534, extra_groups=[],
                           capture_output=True, text=True, timeout=30, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["65534", "5000000"])
        st = stats(m.mnt)
        self.assertEqual([x["dir"] for x in st["cold"]], [cold], st)

    def test_raycluster(self):
        docs, ds, pod, c = self.daemonset()
        argv, opts, mnt = self.spillway_cmdline(c)
        bidi = [(hp, vm) for hp, vm in pod.host_mounts(c)
                if vm.get("mountPropagation") == "Bidirectional"]
        host_mnt = rebase(mnt, bidi[0][1]["mountPath"], bidi[0][0]["path"])

        text = self.load("raycluster.yaml")
        self.assertIn("object_spilling_config", text)
        rc = by_kind(yaml_load_all(text), "RayCluster")
        self.assertEqual(rc["apiVersion"], "ray.io/v1")
        groups = [("head", rc["spec"]["headGroupSpec"])] + [
            (g["groupName"], g) for g in rc["spec"]["workerGroupSpecs"]]
        self.assertGreaterEqual(len(groups), 2)
        for gname, g in groups:
            with self.subTest(group=gname):
                for k, v in (g.get("rayStartParams") or {}).items():
                    self.assertIsInstance(v, str, "rayStartParams.%s must be a string" % k)
                ps = PodSpec(g["template"]["spec"], gname)
                rays = [ctr for ctr in ps.containers()
                        if any(e["name"] == "RAY_object_spilling_config"
                               for e in ctr.get("env") or [])]
                self.assertEqual(len(rays), 1, "no container with RAY_object_spilling_config")
                ctr = rays[0]
                env = {e["name"]: e.get("value") for e in ctr["env"]}
                cfg = json.loads(env["RAY_object_spilling_config"])
                self.assertEqual(cfg["type"], "filesystem")
                paths = cfg["params"]["directory_path"]
                paths = [paths] if isinstance(paths, str) else paths
                inside = ps.mount_of_host(ctr, host_mnt, "HostToContainer")
                for p in paths:
                    self.assertTrue(under(p, inside) and p != inside,
                                    "%s: directory_path %s is not inside the spillway mount "
                                    "(%s in the container)" % (gname, p, inside))
                for init in ps.containers(init=True):
                    ps.mount_of_host(init, host_mnt, "HostToContainer")
                    self.assertIn(inside, " ".join(init["command"]))


class TestNonRoot(SpwTestCase):
    timeout = 120

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("creating a throw-away user needs root")
        for tool in ("useradd", "userdel", "runuser", "fusermount3"):
            if not shutil.which(tool, path=STD_PATH):
                self.fail("%s is not installed" % tool)
        fm = shutil.which("fusermount3", path=STD_PATH)
        st = os.stat(fm)
        self.assertTrue(st.st_mode & stat.S_ISUID and st.st_uid == 0,
                        "%s is not setuid root (%s): users cannot mount FUSE"
                        % (fm, stat.filemode(st.st_mode)))
        self.assertTrue(os.access(SYS_PYTHON, os.X_OK), SYS_PYTHON)
        self.user = ThrowawayUser(self)
        self.user.ensure_fuse_access()
        # a copy of the binary any user may run (the build dir may be closed)
        self.bindir = self.tmpdir()
        os.chmod(self.bindir, 0o755)
        self.bin = os.path.join(self.bindir, "spillway")
        shutil.copy(harness.SPILLWAY, self.bin)
        os.chmod(self.bin, 0o755)
        self.mnt = os.path.join(self.user.home, "mnt")
        self.cold = os.path.join(self.user.home, "cold")
        r = self.user.run(["mkdir", "-p", self.mnt, self.cold])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.log = harness._log_path("nonroot")

    def daemon_checks(self, pid):
        self.assertEqual(proc_uids(pid), [self.user.uid] * 4, "daemon pid %d" % pid)
        entry = harness.mount_entry(self.mnt)
        self.assertIsNotNone(entry)
        self.assertEqual(entry[2], "fuse.spillway", entry)
        opts = entry[3].split(",")
        self.assertIn("user_id=%d" % self.user.uid, opts, entry)
        self.assertIn("group_id=%d" % self.user.gid, opts, entry)
        self.assertIn("nosuid", opts)
        self.assertIn("nodev", opts)
        # without allow_other the mount is the user's alone, root included
        with self.assertRaises(PermissionError):
            os.stat(self.mnt)
        hots = [d for d in os.listdir("/dev/shm") if d.startswith("spillway-%d-" % self.user.uid)]
        self.assertEqual(len(hots), 1, "default hot dir: %s" % hots)
        st = os.stat(os.path.join("/dev/shm", hots[0]))
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (self.user.uid, 0o700))
        return hots[0]

    def unmount_as_user(self):
        r = self.user.run(["fusermount3", "-u", self.mnt])
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertFalse(harness.is_mounted(self.mnt))

    def test_user_mount_spill_restore(self):
        argv = ["runuser", "-u", self.user.name, "--", self.bin, "-f", "-o",
                "hot_size=16M,nvme=%s,min_spill_size=16M" % self.cold, self.mnt]
        sp = harness.Spawned(self.mnt)
        with open(self.log, "wb") as logf:
            logf.write(("$ %s\n" % " ".join(argv)).encode())
            logf.flush()
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                 cwd="/", preexec_fn=harness._pdeathsig, start_new_session=True)
        sp.pids.append(p.pid)

        def stop():  # unmount and stop the daemon, then reap runuser
            sp.stop()
            if p.poll() is None:
                harness.kill_pid(p.pid, p)
            p.wait()

        self.addCleanup(stop)
        deadline = time.monotonic() + harness.MOUNT_DEADLINE
        while not harness.is_mounted(self.mnt):
            self.assertIsNone(p.poll(), "spillway exited (%s) before mounting:\n%s"
                              % (p.returncode, harness.log_tail(self.log)))
            self.assertLess(time.monotonic(), deadline, "no mount after %ss:\n%s"
                            % (harness.MOUNT_DEADLINE, harness.log_tail(self.log)))
            time.sleep(0.01)
        pids = harness.find_daemon_pids(self.mnt)
        sp.pids.extend(pids)
        self.assertEqual(len(pids), 1, pids)
        hot = self.daemon_checks(pids[0])

        # 56 MiB through a 16 MiB hot tier, as the user
        script = os.path.join(self.bindir, "user_io.py")
        with open(script, "w") as f:
            f.write(USER_IO)
        os.chmod(script, 0o644)
        r = self.user.run([SYS_PYTHON, "-I", script, self.mnt, str(56 * MiB)], timeout=90)
        self.assertEqual(r.returncode, 0, "%s\n--- daemon log ---\n%s"
                         % (r.stderr.decode(errors="replace"), harness.log_tail(self.log)))
        res = json.loads(r.stdout)
        self.assertTrue(res["match"], "data read back differs")
        self.assertEqual((res["size"], res["read"]), (56 * MiB, 56 * MiB))
        self.assertEqual(res["owner"], self.user.uid)
        w, rd = res["after_write"], res["after_read"]
        self.assertGreaterEqual(w["spilled"]["bytes"], 40 * MiB, w)
        self.assertLessEqual(w["hot"]["used"], 16 * MiB, w)
        self.assertGreaterEqual(cold_read_bytes(rd), 40 * MiB - w["hot"]["used"], rd)
        self.assertEqual(rd["errors"], {"io": 0, "crc": 0}, rd)
        self.assertEqual([c["dir"] for c in rd["cold"]], [self.cold])
        segs = [n for n in os.listdir(self.cold) if n.endswith(".spw")]
        self.assertTrue(segs, os.listdir(self.cold))
        for n in segs:
            self.assertEqual(os.stat(os.path.join(self.cold, n)).st_uid, self.user.uid, n)

        self.unmount_as_user()
        try:
            rc = p.wait(timeout=harness.EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            self.fail("daemon still running %ss after fusermount3 -u" % harness.EXIT_DEADLINE)
        self.assertEqual(rc, 0, harness.log_tail(self.log))
        # with a cold tier the unmount spilled everything and gave the RAM
        # back: no hot file (nor the hot_dir the daemon made) is left in
        # /dev/shm; the state (the user's, 0700) sits next to the segments
        hotdir = os.path.join("/dev/shm", hot)
        self.addCleanup(shutil.rmtree, hotdir, True)
        left = os.listdir(hotdir) if os.path.isdir(hotdir) else []
        self.assertEqual([n for n in left if not n.startswith(".")], [], hotdir)
        state = os.path.join(self.cold, ".spillway")
        st = os.stat(state)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (self.user.uid, 0o700), state)
        self.assertTrue([n for n in os.listdir(state) if n.startswith("checkpoint.")],
                        os.listdir(state))

    def test_user_mount_daemonized(self):
        """Without -f (how users mount): returns once the mount is live; the
        daemon, reparented to us (child subreaper), exits 0 after fusermount3 -u."""
        PR_SET_CHILD_SUBREAPER = 36
        harness.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.addCleanup(harness.libc.prctl, PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        sp = harness.Spawned(self.mnt)
        self.addCleanup(sp.stop)
        rc, out = run_to_file(["runuser", "-u", self.user.name, "--", self.bin, "-o",
                               "hot_size=16M,nvme=%s" % self.cold, self.mnt], self.bindir,
                              cwd="/")
        self.assertEqual(rc, 0, out)
        self.assertTrue(harness.is_mounted(self.mnt), "returned before the mount was live")
        pids = harness.find_daemon_pids(self.mnt)
        sp.pids.extend(pids)
        self.assertEqual(len(pids), 1, pids)
        self.daemon_checks(pids[0])
        r = self.user.run([SYS_PYTHON, "-c", "import os; p = %r; open(p, 'w').write('hi'); "
                           "print(open(p).read(), os.stat(p).st_uid)"
                           % os.path.join(self.mnt, "small")])
        self.assertEqual(r.stdout.decode().split(), ["hi", str(self.user.uid)], r.stderr)
        self.unmount_as_user()
        deadline = time.monotonic() + harness.EXIT_DEADLINE
        status = None
        while time.monotonic() < deadline:
            try:
                wpid, status = os.waitpid(pids[0], os.WNOHANG)
            except ChildProcessError:
                break  # not our child after all: fall back to liveness
            if wpid:
                break
            time.sleep(0.01)
        if status is not None:
            self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                            "daemon ended with wait status %#x" % status)
        self.assertFalse(harness._pid_alive(pids[0]), "daemon still running after unmount")


if __name__ == "__main__":
    harness.main()
