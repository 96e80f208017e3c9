#!/usr/bin/env python3
"""bench/peers/run.sh --quick as a smoke test: the peer benchmark (spillway vs
rclone, mergerfs, s3fs, passthrough_ll, tmpfs, disk) runs to the end, prints
its header and table with a column for every peer and a row for every metric,
and leaves no mount behind. No timing assertions: a peer failing a workload is
a result printed in the table, not a test failure.

Needs rclone, mergerfs, s3fs, node + tests/s3/node_modules (npm ci) and
libfuse3-dev, like the bench itself (tests/run_all.sh installs them)."""

import os
import signal
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "bench", "peers", "run.sh")
PEERS = ("spillway", "spillway-s3", "rclone", "rclone-s3", "mergerfs", "s3fs", "passthrough",
         "tmpfs", "disk")
METRICS = ("pipeline 2xRAM: wall time", "pipeline 2xRAM: peak RAM tier", "small 64K: write",
           "small 64K: random read", "small 64K: cold write requests", "hot re-read (3 passes)",
           "cold read: time to first byte", "cold read: throughput")
BENCH_TIMEOUT = 420  # --quick is < 90 s on an idle box; leave room for a busy one


def bench_mounts():
    """Mount points the bench creates (its temp dirs are named spw-peers-*)."""
    with open("/proc/mounts") as f:
        return [ln.split()[1] for ln in f if "spw-peers-" in ln.split()[1]]


class BenchPeersQuick(harness.SpwTestCase):
    timeout = BENCH_TIMEOUT + 60

    def test_quick_run_prints_a_table_for_every_peer(self):
        before = set(bench_mounts())
        p = subprocess.Popen([RUN, "--quick", "--build", harness.BUILD_DIR],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=BENCH_TIMEOUT)
        except BaseException:
            # SIGTERM lets the bench tear down its mounts; then make sure it is gone
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
            raise
        self.assertEqual(p.returncode, 0, "bench/peers/run.sh --quick failed:\n" + out[-6000:])
        lines = out.splitlines()
        self.assertTrue(any(ln.startswith("spillway vs peers (issue 7)") for ln in lines), out)
        for key in ("date:", "machine:", "rclone:", "mergerfs:", "s3fs:", "libfuse:"):
            self.assertTrue(any(ln.strip().startswith(key) for ln in lines),
                            "header lacks %s\n%s" % (key, out))
        head = [ln for ln in lines if ln.startswith("metric ")]
        self.assertEqual(len(head), 1, out)
        cols = head[0].split()
        for peer in PEERS:
            self.assertIn(peer, cols, "no column for %s:\n%s" % (peer, out))
        ncols = len(cols)
        for m in METRICS:
            row = [ln for ln in lines if ln.startswith(m)]
            self.assertEqual(len(row), 1, "no row %r:\n%s" % (m, out))
            # a value (or a failure) in every peer's column
            cells = row[0][len(m):].split()
            self.assertGreaterEqual(len(cells), ncols - 1, row[0])
        # spillway itself must get through every workload of the smoke run
        for m in METRICS:
            row = next(ln for ln in lines if ln.startswith(m))
            spw = row[len(m):].split()[1]
            self.assertNotIn("FAIL", spw, "spillway failed %r:\n%s" % (m, out))
        self.assertEqual(set(bench_mounts()) - before, set(), "the bench left mounts behind")


if __name__ == "__main__":
    harness.main()
