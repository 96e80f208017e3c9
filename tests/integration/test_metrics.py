#!/usr/bin/env python3
"""metrics=FILE: the Prometheus text file on a live mount with a cold tier.

Every line must be well-formed exposition format, each family contiguous
after its TYPE line, histograms cumulative with _count == the +Inf bucket,
and counters must only grow between two samples while data moves.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import MiB  # noqa: E402
from lib.tier import TierCase  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (-?[0-9.eE+-]+|\+Inf|NaN)$')
META = re.compile(r'^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$')


def parse(text):
    """Return {family: type} and {sample key: value}; raise on any bad line."""
    types, samples, order, closed = {}, {}, [], set()
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        m = META.match(line)
        if m:
            if m.group(1) == "TYPE":
                if m.group(2) in types:
                    raise AssertionError("line %d: TYPE %s twice" % (n, m.group(2)))
                types[m.group(2)] = m.group(3)
                if current:
                    closed.add(current)
                current = m.group(2)
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("line %d not exposition format: %r" % (n, line))
        name = m.group(1)
        fam = re.sub(r'_(bucket|sum|count)$', '', name) if name not in types else name
        if fam != current:
            raise AssertionError("line %d: sample of %s outside its family block" % (n, fam))
        key = name + (m.group(2) or "")
        if key in samples:
            raise AssertionError("line %d: duplicate sample %s" % (n, key))
        samples[key] = float(m.group(5))
        order.append(key)
    return types, samples


class MetricsTest(TierCase):
    timeout = 120

    def read_metrics(self, path):
        with open(path) as f:
            return f.read()

    def test_metrics_file(self):
        prom = os.path.join(self.cold_dir(), "spillway.prom")
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M",
                        metrics=prom, metrics_interval="200ms")
        harness.wait_until(lambda: os.path.exists(prom), 10, "the metrics file")
        types, first = parse(self.read_metrics(prom))
        for fam, typ in [("spillway_tier_used_bytes", "gauge"),
                         ("spillway_spilled_bytes_total", "counter"),
                         ("spillway_restored_bytes_total", "counter"),
                         ("spillway_segments_written_total", "counter"),
                         ("spillway_errors_total", "counter"),
                         ("spillway_enospc_total", "counter"),
                         ("spillway_writer_waits_total", "counter"),
                         ("spillway_published_reads_total", "counter"),
                         ("spillway_buffer_replies_total", "counter"),
                         ("spillway_direct_reads_total", "counter"),
                         ("spillway_direct_read_bytes_total", "counter"),
                         ("spillway_written_around_files_total", "counter"),
                         ("spillway_chunks_unevictable", "gauge"),
                         ("spillway_spill_segment_seconds", "histogram"),
                         ("spillway_restore_chunk_seconds", "histogram"),
                         ("spillway_writer_wait_seconds", "histogram")]:
            self.assertEqual(types.get(fam), typ, fam)

        # move data: 3x the hot tier through, then read it all back twice,
        # the kernel's cached pages dropped first (read once it is read from
        # the segments; read again it is restored into RAM: tier/admit)
        data = os.urandom(MiB)
        for i in range(12):
            with open(self.p("f%d" % i), "wb") as f:
                for _ in range(16):
                    f.write(data)
        for i in list(range(12)) * 2:
            for fname in [self.p("f%d" % i)]:
                with open(fname, "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    while True:
                        b = f.read(MiB)
                        if not b:
                            break
                        self.assertEqual(b, data)

        def spilled_and_restored():
            s = parse(self.read_metrics(prom))[1]
            return (s["spillway_spilled_bytes_total"] > 0 and
                    s["spillway_restored_bytes_total"] > 0 and
                    s["spillway_direct_read_bytes_total"] > 0 and s)
        harness.wait_until(spilled_and_restored, 20, "spill and restore in the metrics")
        types2, second = parse(self.read_metrics(prom))

        for key, v in first.items():
            fam = re.sub(r'(_bucket|_sum|_count)?(\{.*\})?$', '', key)
            if types2.get(fam) in ("counter", "histogram"):
                self.assertGreaterEqual(second[key], v, "counter %s went down" % key)
        self.assertGreater(second["spillway_spilled_bytes_total"], 0)
        self.assertGreater(second["spillway_restored_chunks_total"], 0)
        self.assertGreater(second["spillway_direct_reads_total"], 0)
        self.assertGreater(second["spillway_segments_written_total"], 0)
        self.assertEqual(second['spillway_tier_limit_bytes{tier="hot"}'], 64 * MiB)

        for h in ("spillway_spill_segment_seconds", "spillway_restore_chunk_seconds",
                  "spillway_writer_wait_seconds"):
            buckets = [(k, v) for k, v in second.items() if k.startswith(h + "_bucket")]
            vals = [v for _, v in buckets]
            self.assertEqual(vals, sorted(vals), "%s buckets not cumulative" % h)
            self.assertEqual(second[h + '_bucket{le="+Inf"}'], second[h + "_count"])
        self.assertGreater(second["spillway_spill_segment_seconds_count"], 0)
        self.assertGreater(second["spillway_restore_chunk_seconds_count"], 0)
        # the stats xattr and the metrics agree on what moved
        st = self.stats()
        third = parse(self.read_metrics(prom))[1]
        self.assertLessEqual(third["spillway_spilled_bytes_total"], st["spilled"]["bytes"])

    def test_bad_metrics_options(self):
        for opt, val in [("metrics", "relative.prom"), ("metrics", "/no/such/dir/x.prom"),
                         ("metrics_interval", "10ms"), ("metrics_interval", "often")]:
            mnt = self.tmpdir()
            rc, _, err, was_mounted = harness.run_spillway(
                ["-f", "-o", "hot_size=64M,%s=%s" % (opt, val), mnt], mnt)
            self.assertEqual(rc, 1, (opt, val, err))
            self.assertIn(opt, err)
            self.assertIn(val, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertFalse(was_mounted)


if __name__ == "__main__":
    harness.main()
