#!/usr/bin/env python3
"""The sqlite workload of bench_overlay.py: build a database of about
--size bytes (a table with an index, inserts in batches of 5,000 rows
committed one by one, then a delete pass and an update pass), then
PRAGMA integrity_check. Prints one JSON line: seconds per phase, the
database's size, the rows, and a digest of its content (the same inputs
give the same digest on any filesystem).

    python3 bench/sqlite_build.py DIR --size 200M
"""
import argparse
import hashlib
import json
import os
import random
import sqlite3
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--size", default="200M")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    target = parse_size(a.size)
    path = os.path.join(a.dir, "bench.db")
    for suffix in ("", "-journal", "-wal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    rnd = random.Random(a.seed)
    t0 = time.monotonic()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
    db.execute("CREATE INDEX t_k ON t (k)")
    db.commit()
    rows = 0
    while os.path.getsize(path) < target:
        batch = [(rows + i, "%016x" % rnd.getrandbits(64), rnd.randbytes(rnd.randrange(100, 300)))
                 for i in range(5000)]
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", batch)
        db.commit()
        rows += 5000
    t1 = time.monotonic()
    db.execute("DELETE FROM t WHERE id % 7 = 3")
    db.commit()
    db.execute("UPDATE t SET v = zeroblob(50) WHERE id % 11 = 5")
    db.commit()
    t2 = time.monotonic()
    ok = db.execute("PRAGMA integrity_check").fetchone()[0]
    h = hashlib.sha256()
    for r in db.execute("SELECT id, k, v FROM t ORDER BY id"):
        h.update(repr(r).encode())
    db.close()
    t3 = time.monotonic()
    io = {}
    with open("/proc/self/io") as f:  # what the application read and wrote
        for line in f:
            k, v = line.split(":")
            io[k] = int(v)
    print(json.dumps({"app_written": io["wchar"], "app_read": io["rchar"],"insert_s": t1 - t0, "update_s": t2 - t1, "check_s": t3 - t2,
                      "total_s": t3 - t0, "db_bytes": os.path.getsize(path), "rows": rows,
                      "integrity": ok, "digest": h.hexdigest()}))
    return 0 if ok == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
