#!/usr/bin/env python3
"""
ray_spill - the seed's pipeline on a local Ray whose object spilling goes to
a directory (a spillway mount), printing what Ray spilled and restored.

Producer tasks each return a NumPy array (deterministic content, one seed per
object) until the objects total SIZE, several times Ray's object store; Ray
spills the overflow to DIR. Then one aggregator task ray.get()s every object
in turn (restoring the spilled ones from DIR) and checks every element
against the array it regenerates from the seed. After the refs are dropped
Ray deletes its spill files; the script waits (bounded) for DIR to hold none.

    python3 ray_spill.py DIR [DIR...] [--total 400M] [--object-size 8M]
                         [--object-store 96M] [--cpus 2] [--json FILE]

Sizes take K/M/G suffixes (powers of 1024). Several DIRs are passed to Ray
as a directory_path list (Ray 2.60 then spills to the first one only: its
node.py replaces the list by its first entry; a spillway mount with several
nvme= directories spreads the segments instead). With DIR on a spillway
mount the mount's own counters (spilled/restored bytes, segments) are printed
too. Exit status 0 only when the job succeeded, every object verified, and no
spill file was left behind.

Needs: ray, numpy (tests/requirements-py.txt; tests/pydeps.sh makes a venv).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

MiB = 1 << 20
STATS_XATTR = "user.spillway.stats"
GOLDEN = 0x9E3779B97F4A7C15


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = s.strip().upper().rstrip("B")
    mult = units.get(t[-1:], 1)
    try:
        v = int(t[:-1] if t[-1:] in units else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r (use e.g. 96M, 2G)" % s)
    if v <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % s)
    return v


def make_array(seed, nbytes):
    """nbytes (a multiple of 8) of uint64: distinct per object and position."""
    import numpy as np
    a = np.arange(nbytes // 8, dtype=np.uint64)
    a *= np.uint64(GOLDEN)
    a ^= np.uint64((seed + 1) * 0x2545F4914F6CDD1D & 0xFFFFFFFFFFFFFFFF)
    return a


def spill_files(dirs):
    """(count, bytes) of regular files under the spill dirs."""
    n = b = 0
    for d in dirs:
        for root, _, names in os.walk(d):
            for name in names:
                try:
                    st = os.lstat(os.path.join(root, name))
                except FileNotFoundError:
                    continue
                n += 1
                b += st.st_size
    return n, b


def mount_root(path):
    """The mountpoint that holds path (the stats xattr lives only there)."""
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def spillway_stats(mnt):
    try:
        return json.loads(os.getxattr(mnt, STATS_XATTR))
    except (OSError, ValueError):
        return None


def ray_store_stats():
    """Ray's own counters from the raylet (the numbers `ray memory
    --stats-only` prints), exact bytes."""
    import ray
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address
    state = get_state_from_address(ray.get_runtime_context().gcs_address)
    s = get_memory_info_reply(state).store_stats
    return {"spilled_bytes": int(s.spilled_bytes_total),
            "spilled_objects": int(s.spilled_objects_total),
            "restored_bytes": int(s.restored_bytes_total),
            "restored_objects": int(s.restored_objects_total),
            "fallback_bytes": int(s.object_store_bytes_fallback),
            "spill_s": float(s.spill_time_total_s),
            "restore_s": float(s.restore_time_total_s)}


class Sampler:
    """Samples each spill dir's file count/bytes while the job runs (what was
    on the mount at the peak); an observation only, nothing waits on it."""

    def __init__(self, dirs, interval=0.1):
        self.dirs, self.interval = dirs, interval
        self.max_files = [0] * len(dirs)
        self.max_bytes = [0] * len(dirs)
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop_ev.is_set():
            self.sample()
            self.stop_ev.wait(self.interval)

    def sample(self):
        for i, d in enumerate(self.dirs):
            n, b = spill_files([d])
            self.max_files[i] = max(self.max_files[i], n)
            self.max_bytes[i] = max(self.max_bytes[i], b)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop_ev.set()
        self.t.join()
        self.sample()


def run(args):
    import numpy as np
    import ray

    dirs = [os.path.abspath(d) for d in args.dirs]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    count = max(1, -(-args.total // args.object_size))
    size = args.object_size // 8 * 8
    if args.spill_uri:
        # Ray's own remote spilling (smart_open + boto3); for S3 the endpoint
        # and credentials come from the AWS_* environment of the IO workers
        spill_cfg = {"type": "smart_open", "params": {"uri": args.spill_uri}}
        dirs = []
    else:
        spill_cfg = {"type": "filesystem",
                     "params": {"directory_path": dirs if len(dirs) > 1 else dirs[0]}}
    if args.buffer_size:
        spill_cfg["params"]["buffer_size"] = args.buffer_size
    temp_dir = args.temp_dir or tempfile.mkdtemp(prefix="ray-")
    res = {"ok": False, "objects": count, "object_size": size, "total": count * size,
           "object_store": args.object_store, "dirs": dirs, "temp_dir": temp_dir,
           "spill_config": spill_cfg, "verified": 0, "bad": []}
    print("ray_spill: %d objects of %d MiB (%d MiB) through a %d MiB object store, "
          "spilling to %s" % (count, size // MiB, count * size // MiB,
                              args.object_store // MiB, ", ".join(dirs) or args.spill_uri),
          flush=True)
    mounts = sorted({mount_root(d) for d in dirs})
    res["mounts"] = mounts
    before = [spillway_stats(m) for m in mounts]
    t0 = time.monotonic()
    # spill in pieces smaller than the store (Ray's default is 100 MiB)
    system_config = {"min_spilling_size": args.min_spilling_size}
    if args.no_spill:
        system_config["automatic_object_spilling_enabled"] = False
    if args.config_env:
        # as a RayCluster sets it (raycluster.yaml): Ray reads any system
        # config entry from RAY_<name> in the raylet's environment
        os.environ["RAY_object_spilling_config"] = json.dumps(spill_cfg)
    else:
        system_config["object_spilling_config"] = json.dumps(spill_cfg)
    res["config_via"] = "env" if args.config_env else "_system_config"
    ray.init(num_cpus=args.cpus, object_store_memory=args.object_store,
             include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False,
             _system_config=system_config)
    res["init_s"] = round(time.monotonic() - t0, 2)
    samp = None
    try:
        @ray.remote
        def produce(seed, nbytes):
            return make_array(seed, nbytes)

        @ray.remote
        def aggregate(refs, nbytes):
            bad = []
            total = 0
            get_s = []
            for seed, ref in enumerate(refs):
                t = time.monotonic()
                a = ray.get(ref)
                get_s.append(time.monotonic() - t)
                if a.nbytes != nbytes or not np.array_equal(a, make_array(seed, nbytes)):
                    bad.append(seed)
                total += a.nbytes
                del a
            return {"bad": bad, "bytes": total, "get_s": get_s}

        samp = Sampler(dirs)
        with samp:
            t1 = time.monotonic()
            refs = [produce.remote(i, size) for i in range(count)]
            ready, _ = ray.wait(refs, num_returns=len(refs), fetch_local=False,
                                timeout=args.timeout)
            if len(ready) != len(refs):
                raise RuntimeError("only %d of %d producers finished in %ds"
                                   % (len(ready), len(refs), args.timeout))
            res["produce_s"] = round(time.monotonic() - t1, 2)
            res["produce_t0"] = t1  # CLOCK_MONOTONIC: a caller's samples line up with it
            res["ray_after_produce"] = ray_store_stats()
            t2 = time.monotonic()
            # refs inside a list reach the task as refs, not values: the
            # aggregator fetches (and Ray restores) them one at a time
            out = ray.get(aggregate.remote(list(refs), size), timeout=args.timeout)
            res["aggregate_s"] = round(time.monotonic() - t2, 2)
            res["aggregate_t0"] = t2
        res["verified"] = count - len(out["bad"])
        res["bad"] = out["bad"]
        res["read_bytes"] = out["bytes"]
        res["get_ms"] = [round(x * 1e3, 2) for x in out["get_s"]]  # per object, in order
        res["ray"] = ray_store_stats()
        # dropping the refs frees the objects: Ray deletes their spill files
        del refs, ready
        t3 = time.monotonic()
        deadline = t3 + args.timeout
        while spill_files(dirs)[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        res["files_after_free"] = spill_files(dirs)[0]
        res["free_s"] = round(time.monotonic() - t3, 2)
    except Exception as e:  # noqa: BLE001 - the job failed: say how, then shut down
        lines = str(e).strip().splitlines()
        res["error"] = "%s: %s" % (type(e).__name__, lines[0] if lines else "")
        try:
            res["ray"] = ray_store_stats()
        except Exception:  # noqa: BLE001
            pass
    finally:
        if samp is not None:
            res["peak_spill_files"] = samp.max_files  # per dir
            res["peak_spill_bytes"] = samp.max_bytes
        t4 = time.monotonic()
        ray.shutdown()
        res["shutdown_s"] = round(time.monotonic() - t4, 2)
        if not args.temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
    res["files_after_shutdown"] = spill_files(dirs)[0]
    res["wall_s"] = round(time.monotonic() - t0, 2)
    after = [spillway_stats(m) for m in mounts]
    res["spillway"] = [
        None if a is None else {
            "spilled_bytes": a["spilled"]["bytes"] - (b or a)["spilled"]["bytes"],
            "restored_bytes": a["restored"]["bytes"] - (b or a)["restored"]["bytes"],
            "segments_written": a["segments"]["written"] - (b or a)["segments"]["written"],
            # files whose bytes went whole into one file on a cold directory
            "extents_created": (a.get("extents", {}).get("created", 0)
                                - (b or a).get("extents", {}).get("created", 0)),
            "extent_bytes": (a.get("extents", {}).get("written_bytes", 0)
                             - (b or a).get("extents", {}).get("written_bytes", 0)),
            "cold": a["cold"], "tiers": a["tiers"], "hot_limit": a["hot"]["limit"]}
        for a, b in zip(after, before)]
    res["ok"] = ("error" not in res and not res["bad"] and res["verified"] == count
                 and res["files_after_shutdown"] == 0)
    return res


def report(res):
    if "error" in res:
        print("ray_spill: the job FAILED: %s" % res["error"])
    r = res.get("ray") or {}
    print("produce: %.1fs, aggregate (ray.get of every object): %.1fs, wall %.1fs"
          % (res.get("produce_s", 0), res.get("aggregate_s", 0), res.get("wall_s", 0)))
    print("ray: spilled %d MiB in %d objects, restored %d MiB in %d objects"
          % (r.get("spilled_bytes", 0) // MiB, r.get("spilled_objects", 0),
             r.get("restored_bytes", 0) // MiB, r.get("restored_objects", 0)))
    for d, n, b in zip(res["dirs"], res.get("peak_spill_files", []),
                       res.get("peak_spill_bytes", [])):
        print("spill dir %s: at most %d files / %d MiB at once" % (d, n, b // MiB))
    print("spill files left: %d after the refs were dropped, %d after ray.shutdown"
          % (res.get("files_after_free", -1), res.get("files_after_shutdown", -1)))
    for d, s in zip(res["mounts"], res.get("spillway") or []):
        if s:
            print("spillway %s: hot tier %d MiB; spilled %d MiB into %d segments, restored "
                  "%d MiB; cold tiers %s"
                  % (d, s["hot_limit"] // MiB, s["spilled_bytes"] // MiB,
                     s["segments_written"], s["restored_bytes"] // MiB,
                     json.dumps(s["tiers"])))
    print("ray_spill: %d of %d objects verified: %s"
          % (res.get("verified", 0), res["objects"], "OK" if res["ok"] else "FAILED"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", help="spill directories (e.g. on a spillway mount)")
    ap.add_argument("--spill-uri", help="spill with Ray's smart_open storage to this URI "
                    "instead (e.g. s3://bucket/prefix; needs smart_open[s3]), no DIR")
    ap.add_argument("--total", type=parse_size, default=400 * MiB,
                    help="bytes the producers return in all (default 400M)")
    ap.add_argument("--object-size", type=parse_size, default=8 * MiB,
                    help="bytes per object (default 8M)")
    ap.add_argument("--object-store", type=parse_size, default=96 * MiB,
                    help="Ray's object_store_memory (default 96M; Ray's minimum is 75M)")
    ap.add_argument("--min-spilling-size", type=parse_size, default=16 * MiB,
                    help="Ray's min_spilling_size (default 16M)")
    ap.add_argument("--buffer-size", type=parse_size, default=MiB,
                    help="filesystem spilling's write buffer (default 1M)")
    ap.add_argument("--config-env", action="store_true",
                    help="pass object_spilling_config in RAY_object_spilling_config (as "
                         "raycluster.yaml does) instead of ray.init's _system_config")
    ap.add_argument("--no-spill", action="store_true",
                    help="turn Ray's object spilling off (the baseline that runs out of store)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per phase")
    ap.add_argument("--temp-dir", help="Ray's session dir (default: a fresh temp dir)")
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args()
    if bool(args.dirs) == bool(args.spill_uri):
        ap.error("give spill directories or --spill-uri (one of them)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    res = None
    try:
        res = run(args)
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res or {"ok": False}, f, indent=1)
    report(res)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
