/*
 * tiers_file — STATE_DIR/tiers: where a filesystem's segments are (cold
 * directories, S3 bucket and options), its uuid and chunk size. The daemon
 * writes it at mount; spillway-fsck reads it to find the segments with no
 * daemon running. Its one writer and one parser, so the format lives here.
 * Format: "key=value" lines, '#' comments; keys uuid (32 hex digits),
 * chunk_size, nvme (dirs joined by ':'), s3, s3_endpoint, s3_region,
 * s3_path_style, s3_credentials, s3_ca_file, s3_part_size. Unknown keys are
 * ignored.
 * Threading: no shared state; callers own their struct tiers_file. The
 * daemon writes the file once, at mount (recover.c, during recovery);
 * fsck reads it with no daemon. A write is atomic (rename over the old).
 */
#ifndef SPW_TIERS_FILE_H
#define SPW_TIERS_FILE_H

#include <stddef.h>
#include <stdint.h>

#define TIERS_MAX_NVME 64

struct tiers_file {
	int have_uuid;
	uint8_t uuid[16];
	uint64_t chunk_size;
	char *nvme;			    /* as the option: dirs joined by ':' (NULL: none) */
	char *nvme_dir[TIERS_MAX_NVME];	    /* read: nvme split */
	int nnvme;			    /* read: entries of nvme_dir */
	char *s3, *s3_endpoint, *s3_region; /* NULL: not set */
	char *s3_credentials, *s3_ca_file;
	int s3_path_style;
	uint64_t s3_part_size; /* 0: not set */
};

/* Write STATE_DIR/tiers from tf (set fields only; s3_path_style with s3)
 * atomically: tiers.tmp, fsync, rename. 0 or -errno. */
int tiers_file_write(const char *state_dir, const struct tiers_file *tf);
/* Parse STATE_DIR/tiers into *tf (zeroed first; free with tiers_file_free,
 * also after a failure). 0, or -errno with a one-line reason in err that
 * names the file (and line). */
int tiers_file_read(const char *state_dir, struct tiers_file *tf, char *err, size_t errlen);
void tiers_file_free(struct tiers_file *tf);

#endif
