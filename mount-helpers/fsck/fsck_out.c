/*
 * fsck_out.c — what spillway-fsck prints: problem lines and notes on stdout
 * (one line each, flushed, so they interleave with stderr in order),
 * operational errors and the progress line on stderr, and the small
 * formatters the messages use. Counts problems (and repairs) and
 * operational errors in struct fsck: main's exit status comes from them.
 * Single-threaded.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void fsck_oper_err(struct fsck *f, const char *fmt, ...)
{
	va_list ap;
	if (f->progress)
		fputs("\r\033[K", stderr);
	fputs("spillway-fsck: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	f->oper = 1;
}

void fsck_problem(struct fsck *f, int fixed, const char *fmt, ...)
{
	va_list ap;
	if (f->progress)
		fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	f->problems++;
	f->fixed += fixed ? 1 : 0;
}

void fsck_note(struct fsck *f, const char *fmt, ...)
{
	va_list ap;
	if (f->quiet)
		return;
	if (f->progress)
		fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

void fsck_progress(struct fsck *f, const char *what, uint64_t done, uint64_t total)
{
	static time_t last;
	time_t now;
	if (!f->progress)
		return;
	now = time(NULL);
	if (now == last && done != total)
		return;
	last = now;
	fprintf(stderr, "\r\033[K%s %" PRIu64 "/%" PRIu64 " (%d%%)", what, done, total,
		total ? (int)(done * 100 / total) : 100);
	if (done == total)
		fputs("\r\033[K", stderr);
	fflush(stderr);
}

/* "64 MiB", "1.5 GiB", "512 bytes" */
const char *fsck_human(uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double d = (double)v;
	int u = -1;
	if (v < 1024) {
		snprintf(buf, len, "%" PRIu64 " bytes", v);
		return buf;
	}
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (d == (double)(uint64_t)d)
		snprintf(buf, len, "%.0f %s", d, unit[u]);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
	return buf;
}

/* "chunk 3" / "chunks 0-3,7" from sorted chunk numbers (duplicates allowed). */
const char *fsck_chunk_list(const uint64_t *c, size_t n, char *buf, size_t len)
{
	size_t used, distinct = 0;
	for (size_t i = 0; i < n; i++)
		distinct += i == 0 || c[i] != c[i - 1];
	used = (size_t)snprintf(buf, len, "%s ", distinct == 1 ? "chunk" : "chunks");
	for (size_t i = 0; i < n && used < len;) {
		size_t k = i;
		while (k + 1 < n && (c[k + 1] == c[k] || c[k + 1] == c[k] + 1))
			k++;
		if (used + 48 > len) {
			snprintf(buf + used, len - used, "...");
			break;
		}
		used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, i ? "," : "", c[i]);
		if (c[k] != c[i])
			used += (size_t)snprintf(buf + used, len - used, "-%" PRIu64, c[k]);
		i = k + 1;
	}
	return buf;
}
void fsck_uuid_str(const uint8_t u[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", u[i]);
}
