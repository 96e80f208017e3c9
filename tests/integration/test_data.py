#!/usr/bin/env python3
"""
test_data - file data survives the trip through spillway's chunked hot tier.

Large files across many chunks, sparse files, concurrent writers, ENOSPC at
hot_size without damage to acknowledged bytes, and big directories.
Run: python3 test_data.py --build BUILD_DIR [-k pattern]
"""

import errno
import hashlib
import os
import random
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import MountedTestCase  # noqa: E402
from lib.data import sha_file  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def sha256_file(path):
    """sha256 of a file read through the page cache."""
    return sha_file(path, bs=4 * MiB, uncached=False)[0]


def write_all(fd, data, off, sizes):
    """pwrite data at off in pieces whose sizes cycle through `sizes`."""
    pos = 0
    i = 0
    mv = memoryview(data)
    while pos < len(data):
        n = min(sizes[i % len(sizes)], len(data) - pos)
        w = os.pwrite(fd, mv[pos:pos + n], off + pos)
        if w <= 0:
            raise AssertionError("pwrite returned %d" % w)
        pos += w
        i += 1


class TestLargeFile(MountedTestCase):
    mount_kw = dict(hot_size="1G", opts=["chunk_size=1M"])
    timeout = 150

    def test_300MiB_many_chunks(self):
        size = 300 * MiB
        rng = random.Random(1234)
        data = b"".join(rng.randbytes(4 * MiB) for _ in range(size // (4 * MiB)))
        digest = hashlib.sha256(data).hexdigest()
        p = self.m.path("big")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            # odd write sizes so writes straddle chunk boundaries
            write_all(fd, data, 0, [MiB, MiB - 4096 + 17, 3 * 4096, 777777, MiB])
            os.fsync(fd)
            self.assertEqual(os.fstat(fd).st_size, size)
        finally:
            os.close(fd)
        st = os.stat(p)
        self.assertEqual(st.st_size, size)
        self.assertGreaterEqual(st.st_blocks * 512, size)
        self.assertEqual(sha256_file(p), digest)
        fd = os.open(p, os.O_RDONLY)
        try:
            # every chunk boundary, read across it
            for k in range(1, 300, 7):
                off = k * MiB - 10
                self.assertEqual(os.pread(fd, 20, off), data[off:off + 20], "boundary %d" % k)
            for _ in range(300):
                off = rng.randrange(size)
                n = rng.randrange(1, 3 * MiB)
                got = os.pread(fd, n, off)
                self.assertEqual(len(got), min(n, size - off))
                self.assertTrue(got == data[off:off + n], "mismatch at %d+%d" % (off, n))
            self.assertEqual(os.pread(fd, 10, size), b"")
        finally:
            os.close(fd)
        # overwrite a range spanning three chunks in the middle, unaligned
        patch = rng.randbytes(2 * MiB + 12345)
        off = 150 * MiB - 5000
        fd = os.open(p, os.O_WRONLY)
        try:
            write_all(fd, patch, off, [len(patch)])
        finally:
            os.close(fd)
        expect = bytearray(data)
        expect[off:off + len(patch)] = patch
        self.assertEqual(sha256_file(p), hashlib.sha256(expect).hexdigest())
        self.assertEqual(os.stat(p).st_size, size)

    def test_sparse_large(self):
        p = self.m.path("sparse")
        pieces = [(0, b"head"), (100 * MiB + 123, b"middle" * 1000), (3 * MiB - 2, b"XYZW"),
                  (GiB - 5, b"tail!")]
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off, b in pieces:
                self.assertEqual(os.pwrite(fd, b, off), len(b))
            self.assertEqual(os.fstat(fd).st_size, GiB)
            for off, b in pieces:
                self.assertEqual(os.pread(fd, len(b), off), b)
            self.assertEqual(os.pread(fd, 4096, 500 * MiB), bytes(4096))
            self.assertEqual(os.pread(fd, 100, 100 * MiB + 23), bytes(100))
            self.assertEqual(os.pread(fd, 8, 3 * MiB - 4), b"\0\0XYZW\0\0")
        finally:
            os.close(fd)
        st = os.stat(p)
        self.assertEqual(st.st_size, GiB)
        self.assertLessEqual(st.st_blocks * 512, 8 * MiB, "holes were allocated")
        # a sparse file larger than hot_size is fine: only written bytes count
        q = self.m.path("huge-sparse")
        with open(q, "wb") as f:
            f.truncate(4 * GiB)
            f.seek(4 * GiB - 1)
            f.write(b"!")
        self.assertEqual(os.stat(q).st_size, 4 * GiB)
        with open(q, "rb") as f:
            f.seek(4 * GiB - 2)
            self.assertEqual(f.read(), b"\0!")


class TestConcurrent(MountedTestCase):
    mount_kw = dict(hot_size="1G")
    timeout = 120

    def test_8_writers(self):
        nthreads = 8
        size = 20 * MiB
        results = {}
        start = threading.Barrier(nthreads)

        def worker(i):
            try:
                rng = random.Random(i)
                data = os.urandom(size)
                digest = hashlib.sha256(data).hexdigest()
                p = self.m.path("t%d" % i)
                start.wait(30)
                fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
                try:
                    pos = 0
                    while pos < size:
                        n = min(rng.randrange(1, 2 * MiB), size - pos)
                        pos += os.write(fd, data[pos:pos + n])
                finally:
                    os.close(fd)
                got = sha256_file(p)
                fd = os.open(p, os.O_RDONLY)
                try:
                    for _ in range(50):
                        off = rng.randrange(size)
                        if os.pread(fd, 4096, off) != data[off:off + 4096]:
                            raise AssertionError("random read mismatch at %d" % off)
                finally:
                    os.close(fd)
                results[i] = "ok" if got == digest else "sha256 mismatch"
            except BaseException as e:  # reported by the main thread
                results[i] = repr(e)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True)
                   for i in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, {i: "ok" for i in range(nthreads)})
        self.assertEqual(sorted(os.listdir(self.mnt)), sorted("t%d" % i for i in range(nthreads)))

    def test_disjoint_writers_one_file(self):
        """Four threads pwrite interleaved 1 MiB stripes of one file."""
        nthreads = 4
        stripes = 32
        p = self.m.path("shared")
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        blocks = {k: os.urandom(MiB) for k in range(stripes)}
        errors = []

        def worker(i):
            try:
                for k in range(i, stripes, nthreads):
                    write_all(fd, blocks[k], k * MiB, [300000, MiB])
            except BaseException as e:
                errors.append(repr(e))

        try:
            threads = [threading.Thread(target=worker, args=(i,), daemon=True)
                       for i in range(nthreads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            self.assertEqual(os.fstat(fd).st_size, stripes * MiB)
            for k in range(stripes):
                self.assertTrue(os.pread(fd, MiB, k * MiB) == blocks[k], "stripe %d" % k)
        finally:
            os.close(fd)


class TestEnospc(MountedTestCase):
    mount_kw = dict(hot_size="64M")
    timeout = 120

    def test_enospc_at_hot_size(self):
        files = []  # (path, bytes acknowledged)
        failure = None
        t0 = time.monotonic()
        for i in range(40):
            p = self.m.path("f%02d" % i)
            data = os.urandom(8 * MiB)
            acked = 0
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                while acked < len(data):
                    acked += os.write(fd, data[acked:acked + MiB])
            except OSError as e:
                failure = e
            finally:
                try:
                    os.close(fd)
                except OSError as e:
                    failure = failure or e
            files.append((p, data[:acked]))
            if failure:
                break
        elapsed = time.monotonic() - t0
        self.assertIsNotNone(failure, "wrote %d MiB into hot_size=64M without ENOSPC"
                             % (sum(len(d) for _, d in files) // MiB))
        self.assertEqual(failure.errno, errno.ENOSPC, "expected ENOSPC, got %r" % failure)
        total = sum(len(d) for _, d in files)
        self.assertLessEqual(total, 64 * MiB, "acknowledged more than hot_size")
        self.assertGreaterEqual(total, 48 * MiB, "ENOSPC long before hot_size was used")
        self.assertLess(elapsed, 20, "ENOSPC took %.1fs (no cold tier to wait for)" % elapsed)
        # every acknowledged byte is intact, and the failing file has no junk
        for p, d in files:
            with open(p, "rb") as f:
                got = f.read()
            self.assertEqual(len(got), len(d), "%s: size %d, acknowledged %d"
                             % (p, len(got), len(d)))
            self.assertTrue(got == d, "%s: acknowledged bytes damaged" % p)
        # a sparse truncate needs no room
        with open(self.m.path("sparse"), "wb") as f:
            f.truncate(GiB)
        self.assertEqual(os.stat(self.m.path("sparse")).st_size, GiB)
        # deleting a file frees room: a new write then succeeds
        os.unlink(files[0][0])
        new = os.urandom(6 * MiB)
        p = self.m.path("after-delete")
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            write_all(fd, new, 0, [MiB])
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(p, "rb") as f:
            self.assertTrue(f.read() == new)
        for pth, d in files[1:]:
            with open(pth, "rb") as f:
                self.assertTrue(f.read() == d, pth)

    def test_enospc_fallocate(self):
        fd = os.open(self.m.path("f"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            with self.assertRaises(OSError) as cm:
                os.posix_fallocate(fd, 0, 128 * MiB)
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
            os.posix_fallocate(fd, 0, 16 * MiB)
            self.assertEqual(os.fstat(fd).st_size, 16 * MiB)
        finally:
            os.close(fd)


class TestBigDirectory(MountedTestCase):
    timeout = 120
    N = 20000

    def test_readdir_20k(self):
        d = self.m.path("d")
        os.mkdir(d)
        t0 = time.monotonic()
        for i in range(self.N):
            os.close(os.open(os.path.join(d, "file-%05d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
        created = time.monotonic() - t0
        t1 = time.monotonic()
        names = os.listdir(d)
        listed = time.monotonic() - t1
        self.assertEqual(len(names), self.N)
        self.assertEqual(len(set(names)), self.N)
        self.assertEqual(sorted(names), ["file-%05d" % i for i in range(self.N)])
        self.assertLess(listed, 10, "listing %d entries took %.1fs" % (self.N, listed))
        t2 = time.monotonic()
        nfiles = sum(1 for e in os.scandir(d) if e.is_file(follow_symlinks=False))
        self.assertEqual(nfiles, self.N)
        self.assertLess(time.monotonic() - t2, 10)
        # lookups stay fast in a big directory
        t3 = time.monotonic()
        for i in range(0, self.N, 10):
            os.stat(os.path.join(d, "file-%05d" % i))
        self.assertLess(time.monotonic() - t3, 10)
        for i in range(0, self.N, 2):
            os.unlink(os.path.join(d, "file-%05d" % i))
        self.assertEqual(sorted(os.listdir(d)), ["file-%05d" % i for i in range(1, self.N, 2)])
        sys.stderr.write("[readdir_20k] create %.1fs, list %.2fs\n" % (created, listed))


if __name__ == "__main__":
    harness.main()
