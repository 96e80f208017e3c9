"""
crashlib - the replayer of tests/crash: reads the log spw_record.so wrote
(the daemon's operations on its cold and state directories, and the test's
marks), works out when each operation became durable, builds crash states
(which operations a power loss kept) and writes a state out as directories.

Persistence model (what a power loss may keep; POSIX, with the one ordering
every journaling Linux filesystem gives, see `ordered_meta`):
  * a data operation on a file (write, truncate, fallocate, O_TRUNC) is
    durable once an fsync/fdatasync of that file that *began* after it has
    returned (a sync racing a write on another thread does not count), or at
    once when the file was opened O_DSYNC or O_SYNC. An O_DIRECT write is
    not (direct_durable=False, the default): it bypasses the page cache,
    but an extending one changes the file's size and extents, metadata that
    only fdatasync makes durable, and the bytes may sit in the device's
    volatile cache until a flush. direct_durable=True counts it as its own
    sync point (then removing the fdatasync before a segment's rename goes
    unseen: tried);
  * a namespace operation (create, mkdir, rename, unlink, link) is durable
    once an fsync of its parent directory (both, for a rename) that began
    after it has returned;
  * syncfs/sync make everything before them durable;
  * ordered_meta (default): namespace operations reach the disk in the order
    they were made (ext4, xfs and btrfs journal them in order), so a durable
    one makes every earlier one durable. ordered_meta=False drops that too
    (any namespace operation may be lost on its own).
A crash state at point k (the first k records happened) keeps every record
durable by k and any subset of the others; data of one file never needs to
reach the disk in order, nor before a rename of that file.
"""

import os
import re
import shutil
import stat
import struct

HDR = struct.Struct("<IIIIQqqqq")
MAGIC = 0x52575053

OPEN, CLOSE, WRITE, TRUNC, FALLOC, RENAME, UNLINK, MKDIR, LINK, SYNC, MARK, UNKNOWN = range(1, 13)
TYPE_NAMES = {OPEN: "open", CLOSE: "close", WRITE: "write", TRUNC: "truncate",
              FALLOC: "fallocate", RENAME: "rename", UNLINK: "unlink", MKDIR: "mkdir",
              LINK: "link", SYNC: "sync", MARK: "mark", UNKNOWN: "unknown"}
SYNC_FSYNC, SYNC_FDATASYNC, SYNC_RANGE, SYNC_FS, SYNC_ALL = 1, 2, 3, 4, 5

O_DIRECT = getattr(os, "O_DIRECT", 0o40000)
O_DSYNC = getattr(os, "O_DSYNC", 0o10000)
O_SYNC = getattr(os, "O_SYNC", 0o4010000)
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
FALLOC_FL_ZERO_RANGE = 0x10

NEVER = float("inf")


class LogError(Exception):
    pass


class Rec:
    __slots__ = ("i", "off", "type", "fd", "a", "b", "c", "path", "path2", "data",
                 "kind", "ino", "dirs", "flags", "durable")

    def __repr__(self):
        t = TYPE_NAMES.get(self.type, self.type)
        s = "#%d@%d %s" % (self.i, self.off, t)
        if self.path:
            s += " " + self.path
        if self.path2:
            s += " -> " + self.path2
        if self.type == WRITE:
            s += " fd=%d off=%d len=%d" % (self.fd, self.a, len(self.data))
        elif self.type in (TRUNC,):
            s += " len=%d" % self.a
        elif self.type == SYNC:
            s += " fd=%d kind=%d start=%d ret=%d" % (self.fd, self.a, self.b, self.c)
        elif self.type == MARK:
            s += " " + bytes(self.data).decode(errors="replace")
        return s


def mark_bytes(text):
    """A MARK record, for the test to append to the log (one os.write)."""
    d = text.encode()
    return HDR.pack(MAGIC, MARK, 0, 0, len(d), -1, 0, 0, 0) + d


def write_bytes(path, off, data):
    """A WRITE record of data at off of the file at path (no fd: replayed by
    path), for the test to append to the log: a write the recorder cannot
    see (the kernel's, through FUSE passthrough, into a recorded file)."""
    p = path.encode()
    return HDR.pack(MAGIC, WRITE, len(p), 0, len(data), -1, off, 0, 0) + p + bytes(data)


def parse(path):
    """The records of a log, in order."""
    with open(path, "rb") as f:
        buf = f.read()
    mv = memoryview(buf)
    recs = []
    off = 0
    while off < len(buf):
        if off + HDR.size > len(buf):
            raise LogError("torn record header at %d" % off)
        magic, typ, pl, p2l, dl, fd, a, b, c = HDR.unpack_from(buf, off)
        if magic != MAGIC:
            raise LogError("bad magic at %d" % off)
        r = Rec()
        r.i, r.off, r.type, r.fd, r.a, r.b, r.c = len(recs), off, typ, fd, a, b, c
        p = off + HDR.size
        r.path = bytes(mv[p:p + pl]).decode() if pl else None
        p += pl
        r.path2 = bytes(mv[p:p + p2l]).decode() if p2l else None
        p += p2l
        r.data = mv[p:p + dl]
        off = p + dl
        r.kind, r.ino, r.dirs, r.flags, r.durable = None, None, (), 0, NEVER
        recs.append(r)
    return recs


class Log:
    """A parsed log: records annotated with the inodes they touch (kind
    'data', 'ns', 'sync', 'mark' or None) and when each became durable."""

    def __init__(self, path, roots, ordered_meta=True, assume_durable=None,
                 direct_durable=False):
        """assume_durable: a regex; namespace operations on matching paths
        are durable at once (to look past a finding already reported)."""
        self.recs = parse(path)
        self.roots = [os.path.normpath(r) for r in roots]
        self.ordered_meta = ordered_meta
        self.sync_flags = O_DSYNC | O_SYNC | (O_DIRECT if direct_durable else 0)
        self.ino_kind = {}
        self._annotate()
        if assume_durable:
            rx = re.compile(assume_durable)
            for r in self.recs:
                if r.kind == "ns" and any(p and rx.search(p) for p in (r.path, r.path2)):
                    r.durable = r.i
        self._durability()
        self.syncs = [r.i for r in self.recs if r.kind == "sync"]
        self.marks = {}
        for r in self.recs:
            if r.type == MARK:
                self.marks[bytes(r.data).decode()] = r.i

    # ---- pass 1: which inode each record touches

    def _new_ino(self, kind):
        n = len(self.ino_kind) + 1
        self.ino_kind[n] = kind
        return n

    def _annotate(self):
        ns = {}
        for root in self.roots:
            ns[root] = self._new_ino("d")
        fds = {}  # fd -> (ino, flags)

        def parent(p, r):
            d = os.path.dirname(p)
            if d not in ns:
                raise LogError("%r: parent %s unknown" % (r, d))
            return ns[d]

        for r in self.recs:
            t = r.type
            if t == UNKNOWN:
                raise LogError("the recorder saw a call it cannot model: %r (%s)" % (r, r.path2))
            if t == MARK:
                r.kind = "mark"
            elif t == OPEN:
                if r.b:  # created
                    if r.path in ns:
                        raise LogError("%r: created over an existing name" % r)
                    r.ino = self._new_ino("f")
                    r.kind, r.dirs = "ns", (parent(r.path, r),)
                    ns[r.path] = r.ino
                else:
                    if r.path not in ns:
                        raise LogError("%r: opens a path the log never made" % r)
                    r.ino = ns[r.path]
                    if r.a & os.O_TRUNC and self.ino_kind[r.ino] == "f":
                        r.kind = "data"
                fds[r.fd] = (r.ino, r.a)
                r.flags = r.a
            elif t == CLOSE:
                fds.pop(r.fd, None)
            elif t in (WRITE, TRUNC, FALLOC):
                if r.fd >= 0:
                    if r.fd not in fds:
                        raise LogError("%r: unknown fd" % r)
                    r.ino, r.flags = fds[r.fd]
                else:
                    r.ino = ns[r.path]
                r.kind = "data"
                if t == WRITE and r.flags & self.sync_flags:
                    r.durable = r.i
            elif t == SYNC:
                if r.c != 0 or r.a == 0:  # failed, or a sync_file_range that waits for nothing
                    continue
                if r.fd >= 0:
                    if r.fd not in fds:
                        raise LogError("%r: unknown fd" % r)
                    r.ino = fds[r.fd][0]
                r.kind = "sync"
            elif t == RENAME:
                if r.a:
                    raise LogError("%r: renameat2 flags are not modelled" % r)
                if r.path not in ns:
                    raise LogError("%r: renames a path the log never made" % r)
                r.ino = ns[r.path]
                r.dirs = tuple({parent(r.path, r), parent(r.path2, r)})
                r.kind = "ns"
                moved = {p: v for p, v in ns.items()
                         if p == r.path or p.startswith(r.path + "/")}
                for p in moved:
                    del ns[p]
                for p, v in moved.items():
                    ns[r.path2 + p[len(r.path):]] = v
            elif t == UNLINK:
                if r.path not in ns:
                    raise LogError("%r: unlinks a path the log never made" % r)
                r.ino = ns.pop(r.path)
                r.dirs, r.kind = (parent(r.path, r),), "ns"
            elif t == MKDIR:
                r.ino = self._new_ino("d")
                r.dirs, r.kind = (parent(r.path, r),), "ns"
                ns[r.path] = r.ino
            elif t == LINK:
                r.ino = ns[r.path]
                r.dirs, r.kind = (parent(r.path2, r),), "ns"
                ns[r.path2] = r.ino
            else:
                raise LogError("record type %d" % t)
        self.final_ns = ns

    # ---- pass 2: when each operation became durable

    def _durability(self):
        pending_data = {}  # ino -> [records]
        pending_ns = []    # records with a set of directories still to sync
        left = {}
        for r in self.recs:
            if r.kind == "data" and r.durable == NEVER:
                pending_data.setdefault(r.ino, []).append(r)
            elif r.kind == "ns" and r.durable == NEVER:
                pending_ns.append(r)
                left[r.i] = set(r.dirs)
            elif r.kind == "sync":
                start = r.b
                everything = r.ino is None
                for ino, lst in list(pending_data.items()):
                    if everything or ino == r.ino:
                        keep = []
                        for d in lst:
                            if d.off < start:
                                d.durable = r.i
                            else:
                                keep.append(d)
                        pending_data[ino] = keep
                if everything or self.ino_kind.get(r.ino) == "d":
                    keep = []
                    for d in pending_ns:
                        if d.off < start:
                            if everything:
                                left[d.i].clear()
                            else:
                                left[d.i].discard(r.ino)
                            if not left[d.i]:
                                d.durable = r.i
                                continue
                        keep.append(d)
                    pending_ns = keep
        if self.ordered_meta:
            # a namespace operation on disk implies every earlier one
            best = NEVER
            for r in reversed(self.recs):
                if r.kind == "ns":
                    best = min(best, r.durable)
                    r.durable = best

    # ---- crash states

    def unsynced(self, k):
        """Records before k that were not durable at k."""
        return [r for r in self.recs[:k] if r.kind in ("data", "ns") and r.durable >= k]

    def variants(self, k, rng, limit):
        """Up to `limit` crash states at point k, as (name, frozenset of
        dropped record indices); the first is always 'all' (nothing lost),
        the second 'synced-only' (everything unsynced lost), then the
        strategies below drawn in turn until `limit` distinct states (or
        no new ones come)."""
        out = [("all", frozenset())]
        u = self.unsynced(k)
        if not u:
            return out
        data = [r for r in u if r.kind == "data"]
        nsops = [r for r in u if r.kind == "ns"]
        by_file = {}
        for r in data:
            by_file.setdefault(r.ino, []).append(r)
        renames = [r for r in nsops if r.type == RENAME and
                   any(d.ino == r.ino and d.i < r.i for d in data)]
        seen = {frozenset()}

        def add(name, dropped):
            dropped = frozenset(dropped)
            if dropped in seen:
                return False
            seen.add(dropped)
            out.append((name, dropped))
            return True

        def ns_cut():
            """Namespace operations lost: a suffix (ordered), or one with
            what needs it (unordered)."""
            if not nsops:
                return []
            if self.ordered_meta:
                return [r.i for r in nsops[rng.randrange(len(nsops) + 1):]]
            return self._closure(rng.choice(nsops), nsops)

        def file_prefix():
            lst = by_file[rng.choice(list(by_file))]
            return "file-prefix", [r.i for r in lst[rng.randrange(len(lst)):]]

        def meta():
            return ("meta-prefix" if self.ordered_meta else "drop-meta"), ns_cut()

        def drop_one():
            return "drop-one", [rng.choice(data).i]

        def rename_first():
            # the rename on disk, the data it renamed not (nor, ordered,
            # any namespace operation after a random later point)
            r = rng.choice(renames)
            keep_after = [q.i for q in nsops if q.i > r.i] if self.ordered_meta else []
            cut = keep_after[rng.randrange(len(keep_after) + 1):] if keep_after else []
            return "rename-before-data", [d.i for d in data if d.ino == r.ino and d.i < r.i] + cut

        writes = [r for r in data if r.type == WRITE and len(r.data) > 1]

        def torn():
            # one write cut short (at a 512-byte sector of the file, or
            # anywhere in a short record), the file's later unsynced data lost
            r = rng.choice(writes)
            n = len(r.data)
            cuts = [c - r.a for c in range((r.a // 512 + 1) * 512, r.a + n, 512)]
            keep = rng.choice(cuts) if cuts else rng.randrange(1, n)
            later = [d.i for d in by_file[r.ino] if d.i > r.i]
            return "torn-write", [(r.i, keep)] + later

        def random_subset():
            p = rng.random()
            return "random", [r.i for r in data if rng.random() < p] + ns_cut()

        add("synced-only", [r.i for r in u])
        gens = [random_subset]
        if by_file:
            gens += [file_prefix, drop_one]
        if nsops:
            gens.append(meta)
        if renames:
            gens.append(rename_first)
        if writes:
            gens.append(torn)
        misses = 0
        while len(out) < limit and misses < 20:
            name, dropped = rng.choice(gens)()
            misses = 0 if add(name, dropped) else misses + 1
        return out[:limit]

    def _closure(self, r, nsops):
        """r and the later unsynced namespace operations that need it."""
        drop = [r]
        names = {r.path, r.path2} - {None}
        inos = {r.ino}
        for q in nsops:
            if q.i <= r.i:
                continue
            qn = {q.path, q.path2} - {None}
            if q.ino in inos or any(n == m or n.startswith(m + "/") for n in qn for m in names):
                drop.append(q)
                names |= qn
                inos.add(q.ino)
        return [q.i for q in drop]

    # ---- writing a state out

    def contents(self, k, dropped=frozenset()):
        """({path: ('d', None) | ('f', bytes)}) of the state: records before
        k except the dropped ones, applied in order. An element (i, n) of
        dropped keeps only the first n bytes of write i (a torn write)."""
        ns = {root: i + 1 for i, root in enumerate(self.roots)}
        data = {}
        torn = {d[0]: d[1] for d in dropped if isinstance(d, tuple)}
        for r in self.recs[:k]:
            if r.i in dropped or r.kind not in ("data", "ns"):
                continue
            t = r.type
            if t == OPEN:
                if r.kind == "ns":
                    ns[r.path] = r.ino
                    data.setdefault(r.ino, bytearray())
                else:  # O_TRUNC
                    data[r.ino] = bytearray()
            elif t == WRITE:
                b = data.setdefault(r.ino, bytearray())
                w = r.data[:torn[r.i]] if r.i in torn else r.data
                end = r.a + len(w)
                if len(b) < end:
                    b.extend(bytes(end - len(b)))
                b[r.a:end] = w
            elif t == TRUNC:
                b = data.setdefault(r.ino, bytearray())
                if r.a < len(b):
                    del b[r.a:]
                else:
                    b.extend(bytes(r.a - len(b)))
            elif t == FALLOC:
                b = data.setdefault(r.ino, bytearray())
                mode, off, ln = r.a, r.b, r.c
                if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
                    end = min(off + ln, len(b)) if mode & FALLOC_FL_KEEP_SIZE else off + ln
                    if end > len(b):
                        b.extend(bytes(end - len(b)))
                    if end > off:
                        b[off:end] = bytes(end - off)
                elif not mode & FALLOC_FL_KEEP_SIZE and off + ln > len(b):
                    b.extend(bytes(off + ln - len(b)))
            elif t == RENAME:
                if ns.get(r.path) != r.ino and self.ino_kind[r.ino] == "f":
                    # the creation was dropped (unordered metadata): the
                    # rename still names the inode
                    ns[r.path2] = r.ino
                    continue
                moved = {p: v for p, v in ns.items()
                         if p == r.path or p.startswith(r.path + "/")}
                for p in moved:
                    del ns[p]
                for p, v in moved.items():
                    ns[r.path2 + p[len(r.path):]] = v
            elif t == UNLINK:
                if ns.get(r.path) == r.ino:
                    del ns[r.path]
            elif t == MKDIR:
                ns[r.path] = r.ino
            elif t == LINK:
                ns[r.path2] = r.ino
        out = {}
        for p in sorted(ns):
            if p in self.roots:
                continue
            # unreachable when a parent is missing (its mkdir was lost)
            d = os.path.dirname(p)
            if d not in self.roots and d not in out:
                continue
            ino = ns[p]
            if self.ino_kind[ino] == "d":
                out[p] = ("d", None)
            else:
                out[p] = ("f", bytes(data.get(ino, b"")))
        return out

    def write_state(self, k, dropped=frozenset()):
        """Replace the roots' contents with the state (the roots stay)."""
        for root in self.roots:
            clear_dir(root)
        for p, (kind, b) in self.contents(k, dropped).items():
            if kind == "d":
                os.mkdir(p, 0o700)
            else:
                with open(p, "wb") as f:
                    f.write(b)


def clear_dir(d):
    for n in os.listdir(d):
        p = os.path.join(d, n)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def scan(roots):
    """{path: ('d', None) | ('f', bytes)} of what is under the roots now."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames:
                out[os.path.join(dirpath, n)] = ("d", None)
            for n in filenames:
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                if not stat.S_ISREG(st.st_mode):
                    out[p] = ("?", None)
                    continue
                with open(p, "rb") as f:
                    out[p] = ("f", f.read())
    return out


def diff_states(want, got):
    lines = []
    for p in sorted(set(want) | set(got)):
        a, b = want.get(p), got.get(p)
        if a is None:
            lines.append("only on disk: %s" % p)
        elif b is None:
            lines.append("only in the replay: %s" % p)
        elif a != b:
            if a[0] != b[0]:
                lines.append("%s: %s in the replay, %s on disk" % (p, a[0], b[0]))
            else:
                x, y = a[1], b[1]
                i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]),
                         min(len(x), len(y)))
                lines.append("%s: %d bytes in the replay, %d on disk, first difference at %d"
                             % (p, len(x), len(y), i))
    return lines
