#!/usr/bin/env python3
"""
perf_split - where a spillway daemon's CPU goes, in the terms of the data
path: a `perf record -g` file (bench_ray.py --perf writes them) split by
what each sample's kernel and user stack is doing (the first rule whose
marker is anywhere in the stack wins, in the order of RULES below).

    python3 bench/ray/perf_split.py DIR/spillway-daemon.data [--cpu-per-gib 6.0]
    python3 bench/ray/perf_split.py DIR/spillway-all.data --by-process \\
        [--pids DIR/spillway-waits.txt.pids]

With --cpu-per-gib (the daemon's CPU seconds per GiB from the bench's
table) each share is also given as seconds per GiB. --by-process splits a
whole-machine recording by process instead (Ray's workers, the raylet, the
daemon, the kernel's threads, the rest of the machine); --pids keeps only
the processes that were in the run's cgroup, and the kernel's own threads
(writeback, kswapd), which are in no cgroup. Needs perf. Python 3 stdlib.
"""

import argparse
import re
import subprocess
import sys

# (category, markers): a sample is in the first category one of whose
# markers names a frame of its stack (a prefix match)
RULES = [
    ("memcg reclaim (the cgroup's limit, in the daemon's context)",
     ("try_to_free_mem_cgroup_pages", "mem_cgroup_handle_over_high", "shrink_node",
      "shrink_lruvec")),
    ("punch of spilled/dropped hot pages (fallocate PUNCH_HOLE)", ("shmem_fallocate",)),
    ("page-cache drops of the mount (reverse invalidation at close)",
     ("fuse_reverse_inval", "invalidate_inode_pages2")),
    ("tmpfs write: copy", ("copy_folio_from_iter_atomic",)),
    ("tmpfs write: page allocation, memcg charge, LRU",
     ("shmem_alloc_and_add_folio", "shmem_get_folio_gfp", "shmem_write_begin")),
    ("tmpfs write: the rest", ("shmem_file_write_iter",)),
    ("tmpfs read (spill source, replies): copy", ("copy_page_to_iter",)),
    ("tmpfs read: the rest (folio_mark_accessed, lookups)", ("shmem_file_read_iter",)),
    ("FUSE request in (/dev/fuse read: the write payload copied in)", ("fuse_dev_do_read",)),
    ("FUSE reply out (/dev/fuse write/splice: data copied to the reader)",
     ("fuse_dev_do_write", "fuse_dev_splice_write")),
    ("segment write (O_DIRECT)", ("ext4_file_write_iter", "ext4_dio_write_iter")),
    ("segment read (O_DIRECT)", ("ext4_file_read_iter", "ext4_dio_read_iter")),
    ("crc32c", ("crc_hw", "crc32c")),
    ("io_uring (submission, completion waits)", ("io_uring", "io_wq", "io_cqring", "io_issue_sqe")),
    ("/proc and cgroup reads (the pressure thread)", ("seq_read_iter", "kernfs_", "proc_")),
    ("scheduling, futexes, wake-ups", ("schedule", "futex", "finish_task_switch",
                                       "try_to_wake_up", "__switch_to")),
    ("page faults", ("asm_exc_page_fault", "handle_mm_fault")),
    ("user memcpy/memmove", ("__memmove", "__memcpy", "memcpy")),
]


def samples(path):
    """Yield (comm, pid, [frames, innermost first]) from perf script."""
    p = subprocess.Popen(["perf", "script", "-i", path, "-F", "comm,pid,tid,ip,sym"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         errors="replace")
    head, frames = None, []
    for line in p.stdout:
        if not line.strip():
            if head:
                yield head[0], head[1], frames
            head, frames = None, []
        elif line[0] not in " \t":
            m = re.match(r"(.*?)\s+(\d+)/(\d+)", line.rstrip())
            head = (m.group(1).strip(), int(m.group(2))) if m else (line.strip(), 0)
            frames = []
        else:
            f = line.split(None, 1)
            frames.append(f[1].strip() if len(f) > 1 else "")
    if head:
        yield head[0], head[1], frames
    p.wait()


def category(frames):
    for name, markers in RULES:
        for fr in frames:
            if fr.startswith(markers):
                return name
    return "other: " + (frames[0].split("+")[0] if frames else "?")


def who(comm, pid, pids):
    if pids is not None and pid in pids:
        return pids[pid]
    c = re.sub(r"[0-9]+", "N", comm)
    if c.startswith(("kworker", "kswapd", "ksoftirqd", "rcu", "jbd2", "migration", "swapper")):
        return "kernel thread " + c.split("/")[0]
    return None if pids is not None else c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--cpu-per-gib", type=float)
    ap.add_argument("--by-process", action="store_true")
    ap.add_argument("--pids", help="'PID NAME' lines: the processes of the run")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    pids = None
    if a.pids:
        with open(a.pids) as f:
            pids = {int(ln.split()[0]): ln.split(None, 1)[1].strip() for ln in f if ln.strip()}
    counts, n = {}, 0
    for comm, pid, frames in samples(a.data):
        n += 1
        if a.by_process:
            k = who(comm, pid, pids)
            if k is None:
                k = "(outside the run)"
        else:
            k = category(frames)
        counts[k] = counts.get(k, 0) + 1
    if not n:
        sys.exit("perf_split: no samples in %s" % a.data)
    print("%s: %d samples%s" % (a.data, n, "" if a.by_process else ", split by what the"
                                " stack is doing"))
    for k, c in sorted(counts.items(), key=lambda kv: -kv[1])[:a.top]:
        extra = "  %.2f s/GiB" % (a.cpu_per_gib * c / n) if a.cpu_per_gib else ""
        print("%6.1f%%%s  %s" % (100.0 * c / n, extra, k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
