/*
 * to_extent — a file all in RAM moves into an extent (tier/extent): the
 * evictor's pick of a cold big file and an evict's (spill_file_to_extent:
 * copied, made durable and crc'd outside the inode lock, committed only if
 * no chunk changed meanwhile), and what any such move does to the file's
 * chunks (spill_let_go_for_extent_locked, also a stream's move in
 * tier_io.c).
 */
#include "tier/spill/to_extent.h"
#include "tier/tier_i.h"
#include "tier/extent/extent.h"
#include "tier/spill/spill.h"

#include "common/log.h"
#include "index/journal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spill_let_go_for_extent_locked(struct tier *t, struct inode *in, int fd)
{
	uint32_t opens = in->open_count; /* theirs: the opens from before */
	int ret;

	if ((ret = idx_journal_cut_locked(t->idx, in, 0, in->nchunks)) < 0)
		log_err("inode %llu: its move into an extent is not journaled: %s",
			(unsigned long long)in->ino, strerror(-ret));
	for (uint64_t c = 0; c < in->nchunks; c++) {
		if (in->chunks[c].state == CHUNK_ABSENT)
			continue;
		chunk_set_state(in, c, CHUNK_ABSENT);
		in->chunks[c].around = 0;
		in->chunks[c].gen++;
	}
	/* a spill still reading a chunk through its mapping (a write made it
	 * dirty again under the spill: the state let the move by) must not
	 * meet a cut page, a SIGBUS to it; it finds the generation moved and
	 * keeps nothing. The wait drops the lock: the file is the extent's
	 * meanwhile, its new opens take no hold on the hot file. */
	spill_wait_mapped_locked(t, in, 0, in->nchunks);
	if (ftruncate(fd, 0) == 0)
		hot_account_locked(t->hot, in);
	for (uint32_t i = 0; i < opens; i++)
		hot_fd_put_locked(t->hot, in);
}

int64_t spill_file_to_extent(struct tier *t, struct inode *in)
{
	struct ext_move m;
	uint32_t *gens = NULL;
	uint64_t n = 0, size = 0, before;
	int fd = -1, ret;

	idx_inode_lock(in);
	if (in->open_count == 0 && in->size >= t->cfg->extent_min && ext_movable_locked(t, in) == 0 &&
	    (gens = malloc(in->nchunks * sizeof(*gens))) &&
	    (fd = hot_fd_get_locked(t->hot, in)) >= 0) {
		n = in->nchunks;
		size = in->size;
		for (uint64_t c = 0; c < n; c++)
			gens[c] = (uint32_t)in->chunks[c].gen;
	}
	idx_inode_unlock(in);
	if (fd < 0) {
		free(gens);
		return -EAGAIN;
	}
	/* the copy, its fdatasync and its crcs without the lock: a write
	 * meanwhile bumps a chunk's generation and the move is dropped */
	ret = ext_move_prepare(t, in->ino, fd, size, &m);
	idx_inode_lock(in);
	before = hot_used(t->hot);
	if (ret == 0) {
		int same = in->nchunks == n && in->size == size;
		for (uint64_t c = 0; same && c < n; c++)
			same = (uint32_t)in->chunks[c].gen == gens[c];
		if (!same || (ret = ext_move_commit_locked(t, in, &m)) < 0) {
			ext_move_abort(t, &m);
			ret = -EAGAIN;
		} else {
			/* counted with the extent in place, before the lock drops */
			__atomic_add_fetch(&t->st.ext_evicted, 1, __ATOMIC_RELAXED);
			spill_let_go_for_extent_locked(t, in, fd);
		}
	}
	hot_fd_put_locked(t->hot, in);
	idx_inode_unlock(in);
	free(gens);
	if (ret < 0)
		return ret;
	uint64_t after = hot_used(t->hot);
	return before > after ? (int64_t)(before - after) : 0;
}
