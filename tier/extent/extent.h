/*
 * ROOM tier/extent/: extents (DESIGN section 16), a file whose bytes all live
 * in one file of a cold directory, <dir>/extents/<ino>-<id> (named by inode
 * and a per-mount-unique id, never by user path), at their own offsets.
 * What it does:
 * - Grants one to a stream under pressure: an open for writing of an empty
 *   file within EXT_RECENT_MS of a file written around (tier/admit: RAM
 *   above spill_threshold), with passthrough on, gets an extent on the cold directory with the most room (only one that
 *   keeps a margin: EXT_MARGIN_MIN and 10 % free, and with S3 below stays
 *   under nvme_threshold), journaled (JR_EXTENT) before the open replies.
 * - Adopts a stream of extent_min (a mount option) or more written while RAM is above
 *   low_watermark, or the moment it is written around RAM (tier/admit):
 *   its bytes so far move into a new extent, the rest of its writes go there
 *   through the daemon, and later opens to the kernel (ext_adopt_locked).
 * - Every open of such a file is passed through to the extent (the
 *   kernel's one-mode rule: while it has daemon opens, new ones go through
 *   the daemon); the kernel reads and writes it into the disk's page cache,
 *   as for a plain directory: a kill -9 of the daemon loses nothing it took.
 *   Size and mtime are read back from the extent (getattr, fsync, close).
 * - Seals it seal_delay after its last writer's close (the maintenance
 *   worker; at the close with seal_delay=0; every one queued at unmount):
 *   a file deleted or written again first is never synced nor crc'd for
 *   it, as a plain directory never writes back a file deleted before its
 *   dirty pages expire. A seal: its bytes and name made durable,
 *   then a crc32c per JRNL_EXT_BLOCK from the page cache, journaled; a write
 *   (an open for writing, a daemon write, truncate, fallocate) unseals it,
 *   the unseal durable before the extent changes, until the next seal.
 *   Unsealed extents are recovered by their size on disk and sealed at mount.
 * - Serves what still reaches the daemon (passthrough off, another open's
 *   mode): reads of a sealed extent verified block by block (-EIO on a
 *   mismatch), writes into it; truncate, fallocate, SEEK_DATA/HOLE, fsync
 *   (fdatasync of the extent and the journal).
 * - Deletes it with its file (the release hook), or at a truncate to 0 with
 *   no opens (the file goes back to the hot tier); recovery removes extents
 *   no file names.
 * - An evict of a file of extent_min or more all in RAM (or the evictor's
 *   pick of such a cold closed file: tier/spill/to_extent.c) moves it into an
 *   extent (durable first) rather than into segments: read once later, the
 *   kernel reads it at the disk's speed.
 * - Demotion to S3 (tier/spill/demote_ext.c, with the segments' demotion,
 *   as the cold directory passes nvme_threshold): a sealed, closed extent,
 *   least recently opened first, is read back (verified against its crcs)
 *   into one segment written to S3, and the file leaves extent form: its
 *   chunks COLD there (restored, read ranged, adopted by a replacement
 *   node like any segment's), the extent removed.
 * - warm (tier_warm_file) brings a closed one into RAM the same way: into
 *   segments on the first cold tier, then restored like any cold file (an
 *   open one, or with no room there, is read into the page cache).
 * Threading: the *_locked calls with the inode lock held; the others take
 * it. Lock order as tier.c says (inode lock, then nothing of this room's:
 * its state is atomics and read-only paths).
 */
#ifndef SPW_EXTENT_H
#define SPW_EXTENT_H

#include <stddef.h>
#include <stdint.h>

struct tier;
struct inode;

/* A file written around this recently (tier/admit) says streams are under
 * pressure: new ones get extents */
#define EXT_RECENT_MS 10000
/* Free room a directory keeps beyond an extent (and 10 % of its size) */
#define EXT_MARGIN_MIN (1ull << 30)

/* The room (tier_new, after the stores; NULL t->extr without nvme, with
 * extents=off or without passthrough's kernel support: no extent is
 * granted, existing ones are still served). Makes <dir>/extents (0700) and
 * removes extents no file of the index names (with a journal: after
 * replay). 0 or -errno with err set. */
int ext_room_new(struct tier *t, char *err, size_t errlen);
/* tier_start (after fuse_daemonize: no thread survives its fork): the
 * reaper, which closes removed extents' fds. Without it (never started, or
 * no thread) they are closed where removed. */
void ext_room_start(struct tier *t);
/* Volatile mounts (no journal): every extent goes. Then free. */
void ext_room_free(struct tier *t);

/* tier_open: 1 when in has (or now got: may_grant) an extent and the open
 * is counted as its (*backing_id > 0: passed through; pt: the caller can
 * pass it), 0 when it is not an extent's business, -errno. in->lock held. */
int ext_open_locked(struct tier *t, struct inode *in, int write, int pt,
		    int (*pt_open)(void *ctx, int fd), void *ctx, int32_t *backing_id);
/* A file all in RAM becomes an extent (a stream as RAM fills, or an evict
 * of a big file): its bytes so far copied from its hot file (hot_fd) into a
 * new extent (made durable first with `durable`), journaled;
 * its opens now count as the extent's (through the daemon: they were
 * opened so), its next opens go to the kernel. Only a file all in RAM
 * (no cold copy, nothing pinned or restoring, no passthrough open). The
 * caller lets its chunks go. 0, or -errno (-EAGAIN: not such a file;
 * nothing changed). in->lock held. */
int ext_adopt_locked(struct tier *t, struct inode *in, int hot_fd, int durable);
/* Could in become an extent now (all in RAM or empty: no cold copy,
 * nothing pinned, restoring or passed through; extents on)? 0 or -EAGAIN.
 * in->lock held. */
int ext_movable_locked(struct tier *t, struct inode *in);
/* The evictor's move of a closed file all in RAM, in steps that keep the
 * copy out of the inode lock: ext_move_prepare (no lock) writes size
 * bytes of hot_fd into a new extent file, durable, and takes their crcs;
 * ext_move_commit_locked makes it in's extent, sealed and journaled, if in
 * is still movable, closed and that size (the caller checks its bytes did
 * not change meanwhile: the chunks' generations), else -EAGAIN;
 * ext_move_abort removes one not committed. 0 or -errno. */
struct ext_move {
	int fd, dev;
	uint64_t ino, id, size;
	uint32_t ncrc;
	uint32_t *crc;
};
int ext_move_prepare(struct tier *t, uint64_t ino, int hot_fd, uint64_t size,
		     struct ext_move *m);
int ext_move_commit_locked(struct tier *t, struct inode *in, struct ext_move *m);
void ext_move_abort(struct tier *t, struct ext_move *m);
/* Seal in's extent now if it has no writer (an evict's, which no close
 * will seal). in->lock held. */
void ext_seal_locked(struct tier *t, struct inode *in);
/* tier_close: 1 when the open was an extent's (closed; the last writer's
 * seals it), 0 not; counted: ext_open_locked counted it (else it is an
 * open from before the extent, counted as a writer). Takes the lock. */
int ext_close(struct tier *t, struct inode *in, int write, int counted, int32_t backing_id,
	      void (*pt_close)(void *ctx, int32_t id), void *ctx);
/* Seals due: up to max inodes whose extent's last writer closed
 * seal_delay ago (all: every one queued, due or not), taken off the
 * queue. Any thread. */
size_t ext_seals_due(struct tier *t, uint64_t *inos, size_t max, int all);
/* Seal ino's extent now if it is closed and unsealed (takes the lock). */
void ext_seal_ino(struct tier *t, uint64_t ino);
/* A seal taken off the queue but not done (a job cancelled): back on it. */
void ext_seal_requeue(struct tier *t, uint64_t ino);
/* Every seal queued, now (the unmount, before its last checkpoint). */
void ext_seal_all_due(struct tier *t);
/* Size and mtime read back from the extent. in->lock held. */
void ext_refresh_locked(struct tier *t, struct inode *in);

/* The daemon's I/O on a file with an extent; each returns 1 when in has
 * none (the caller goes on as for any file), else 0 or -errno. */
/* A read: len bytes (short at EOF) at off of fd, or, from a sealed
 * extent, verified bytes at buf + skip (buf: seg_buf_alloc'ed, the
 * caller's to free). */
struct ext_read {
	int fd;
	uint64_t len;
	void *buf;
	uint64_t skip;
};
int ext_read_begin(struct tier *t, struct inode *in, uint64_t off, size_t len,
		   struct ext_read *r);
/* A write goes into *fd at the file's offset; ext_write_end after it with
 * the bytes written (or -errno). */
int ext_write_begin(struct tier *t, struct inode *in, int *fd);
void ext_write_end(struct tier *t, struct inode *in, uint64_t off, long written);
int ext_truncate(struct tier *t, struct inode *in, uint64_t size);
int ext_fallocate(struct tier *t, struct inode *in, int mode, uint64_t off, uint64_t len);
/* 1 not an extent's; else *res = offset or -errno */
int ext_lseek(struct tier *t, struct inode *in, uint64_t off, int whence, int64_t *res);
/* fdatasync of the extent and its name, then the journal's sync */
int ext_fsync(struct tier *t, struct inode *in);
/* evict: drop its page cache; warm: read it into the page cache */
int ext_evict(struct tier *t, struct inode *in, int warm);
/* "extent=1 sealed=S", after tier_file_state's: 1 when none */
int ext_state(struct tier *t, struct inode *in, char *buf, size_t len);
/* The release hook: close and delete in's extent (in is going). */
void ext_drop(struct tier *t, struct inode *in);
/* Demotion to S3 (tier/spill/demote_ext.c): the file leaves extent form,
 * its chunks COLD in a segment written to S3. */
struct ext_cand {
	uint64_t ino, used, size; /* used: idx_tick of its last open or seal */
};
/* Up to max extents that could go (sealed, closed, on disk), least
 * recently used first. Walks the index (index lock, each inode's lock). */
size_t ext_pick_cold(struct tier *t, struct ext_cand *v, size_t max);
/* What the upload reads: a dup of the extent's descriptor, a copy of its
 * crcs, and what says it is unchanged at the commit. */
struct ext_snap {
	int fd;
	uint64_t id, size;
	uint32_t wgen, ncrc;
	uint32_t *crc;
};
/* in's extent, if it could go now (sealed, closed, holding all its bytes).
 * 0, or -EAGAIN / -errno (s empty). in->lock held. */
int ext_snap_locked(struct tier *t, struct inode *in, struct ext_snap *s);
void ext_snap_free(struct ext_snap *s);
/* in's extent is still what s saw, sealed and closed. in->lock held. */
int ext_snap_same_locked(struct inode *in, const struct ext_snap *s);
/* Its bytes failed their crcs (ext_verify): not picked again until it
 * changes. in->lock held. */
void ext_snap_bad_locked(struct inode *in, const struct ext_snap *s);
/* len bytes at off (a multiple of JRNL_EXT_BLOCK) of s's extent, as read
 * into buf, against its crcs: 0 or -EIO. */
int ext_verify(const struct ext_snap *s, uint64_t off, const void *buf, uint64_t len);
/* The file leaves extent form: rs[0..n) (its chunks' new records) and the
 * extent's end (written into rs[n]: room for n + 1) journaled as one
 * transaction and synced, then the extent closed and removed. 0, or
 * -errno: the extent stays (the journal may still hold the transaction
 * only if it failed: read-only from then on). in->lock held. */
struct jrec;
int ext_let_go_locked(struct tier *t, struct inode *in, struct jrec *rs, int n);

/* Recovery (recover_finish, before journaling starts): open in's extent,
 * take its size on disk, seal it when unsealed. 0, 1 when its file is gone
 * (the caller counts the file lost). in->lock held. */
int ext_recover_locked(struct tier *t, struct inode *in);

#endif
