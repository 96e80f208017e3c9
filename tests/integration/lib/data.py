"""
lib.data - the bytes the integration tests write and check: reproducible
content streams (content, write_content, content_sha), uncached reads
(open_uncached, read_all, sha_file), first_diff, and run_threads.
No mount state: any test may use these on any path.
"""

import hashlib
import os
import random
import struct
import threading

KiB = 1 << 10
MiB = 1 << 20
PAGE = 4096

# --------------------------------------------------------------------------
# reproducible content: page k of a stream `tag` is a 16-byte stamp (tag, k)
# followed by a slice of a random pool chosen by (tag, k). A page from the
# wrong place, the wrong file or an older version never compares equal.

_POOL = random.Random(0x5B111).randbytes(MiB + 2 * PAGE)


def _page(tag, k):
    s = (k * 7919 + tag * 104729) % MiB
    return struct.pack("<QQ", tag, k) + _POOL[s:s + PAGE - 16]


def content(tag, off, n):
    """Bytes [off, off+n) of content stream `tag`."""
    if n <= 0:
        return b""
    first, last = off // PAGE, (off + n - 1) // PAGE
    b = b"".join([_page(tag, k) for k in range(first, last + 1)])
    skip = off - first * PAGE
    return b[skip:skip + n]


def content_sha(tag, size, bs=4 * MiB):
    h = hashlib.sha256()
    for off in range(0, size, bs):
        h.update(content(tag, off, min(bs, size - off)))
    return h.hexdigest()


# --------------------------------------------------------------------------
# file helpers


def write_content(path, tag, size, bs=MiB, flags=os.O_CREAT | os.O_WRONLY | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    try:
        off = 0
        while off < size:
            n = min(bs, size - off)
            w = os.pwrite(fd, content(tag, off, n), off)
            if w != n:
                raise AssertionError("%s: short pwrite %d of %d at %d" % (path, w, n, off))
            off += n
    finally:
        os.close(fd)


def open_uncached(path, flags=os.O_RDONLY):
    """Open and drop the kernel's cached pages, so reads reach the daemon;
    no readahead either (a read touches only the chunks it names)."""
    fd = os.open(path, flags)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd


def read_all(fd, size, bs=MiB):
    parts = []
    off = 0
    while off < size:
        b = os.pread(fd, min(bs, size - off), off)
        if not b:
            break
        parts.append(b)
        off += len(b)
    return b"".join(parts)


def first_diff(a, b):
    n = min(len(a), len(b))
    for off in range(0, n, PAGE):
        if a[off:off + PAGE] != b[off:off + PAGE]:
            for i in range(off, min(off + PAGE, n)):
                if a[i] != b[i]:
                    return i
    return n if len(a) != len(b) else -1


def sha_file(path, bs=MiB, uncached=True):
    """(sha256 hex, length) of a file. uncached: through a fresh open whose
    cached pages are dropped first, with no readahead (open_uncached), so the
    bytes come from the daemon; else a plain read (the page cache may answer)."""
    h = hashlib.sha256()
    n = 0
    fd = open_uncached(path) if uncached else os.open(path, os.O_RDONLY)
    try:
        while True:
            b = os.read(fd, bs)
            if not b:
                return h.hexdigest(), n
            h.update(b)
            n += len(b)
    finally:
        os.close(fd)


def run_threads(fns):
    """Run callables in threads; re-raise the first exception any of them hit."""
    errs = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902 - reported below
            errs.append(e)

    ths = [threading.Thread(target=wrap, args=(f,), daemon=True) for f in fns]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errs:
        raise errs[0]

