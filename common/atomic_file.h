/*
 * atomic_file — replace a small file's whole content crash-safely: write
 * PATH.tmp, fsync it, rename it over PATH, fsync the directory.
 * Guarantees: after a crash PATH holds either the old or the new content,
 * never a mix; on failure PATH is untouched and PATH.tmp removed; the
 * first failing call's errno is returned as is (ENOSPC stays ENOSPC).
 * Threading: no shared state; two writers of one PATH must not overlap
 * (they share PATH.tmp).
 */
#ifndef SPW_ATOMIC_FILE_H
#define SPW_ATOMIC_FILE_H

#include <stddef.h>

/* 0 or -errno. path must name a file in an existing directory. */
int atomic_file_write(const char *path, const void *buf, size_t len);
/* fsync the directory holding path (its entry, e.g. a directory just made
 * or a file just renamed, is durable then). 0 or -errno. */
int atomic_file_sync_parent(const char *path);

#endif
