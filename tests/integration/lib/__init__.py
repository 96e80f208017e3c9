"""
lib - the integration tests' shared fixtures, beside harness.py (which runs
mounts, timeouts and cleanup). Test modules import harness and lib, never
each other; nothing here is named test_*.py, so ctest does not run it.

  lib.data   reproducible content streams, uncached reads, sha256 of a file
  lib.tier   cold directories, xattr helpers, TierCase (a mount with an
             NVMe cold tier), Tmpfs (a small tmpfs that fills up)
  lib.crash  CrashMount (kill -9, remount on the same state), CrashCase,
             DurCase
  lib.s3     the s3rver and fault-proxy helper processes, S3Case
  lib.fsx    spw_fsx runs on a mount
"""
