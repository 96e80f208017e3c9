/*
 * mkseeds — write the seed corpora of tests/fuzz/corpus/ from real outputs:
 * records from jrnl_encode, a checkpoint and a journal written by a real
 * journal (jrnl_start / jrnl_append), a segment from seg_header_encode and
 * seg_footer_encode, and S3 responses as s3rver sends them.
 *   build/tests/fuzz/fuzz_mkseeds tests/fuzz/corpus
 */
#include "fuzz.h"
#include "index/journal.h"
#include "tier/segment/segment.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_top;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", g_top, target);
	mkdir(dir, 0755);
	if (fuzz_write_file(dir, name, buf, len) < 0) {
		fprintf(stderr, "cannot write %s/%s\n", dir, name);
		exit(1);
	}
	chmod(dir, 0755);
}

static void puts_seed(const char *target, const char *name, const char *s)
{
	put(target, name, s, strlen(s));
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	*len = fread(buf, 1, (size_t)n, f);
	fclose(f);
	return buf;
}

static struct jrec g_snap[8];
static int g_nsnap;

static int snap(void *arg, struct jrnl_emitter *e)
{
	for (int i = 0; i < g_nsnap; i++)
		if (jrnl_emit(e, &g_snap[i]) < 0)
			return -EIO;
	return 0;
}

static int ignore(void *arg, const struct jrec *r)
{
	return 0;
}

static void journals(void)
{
	const char *dir = fuzz_scratch();
	char state[256], path[600], name[64];
	struct jrnl_config cfg = {.sync_ms = 0, .checkpoint_bytes = 1ull << 30,
				  .chunk_size = 4ull << 20};
	struct jrnl_recovery info;
	struct journal *j;
	char err[256];
	uint8_t *ck, *jn, *both, buf[512];
	size_t ckl, jnl;
	uint64_t gen;
	struct jrec recs[] = {
	    {.type = JR_INODE, .ino = 3, .attr = {.mode = 0100644, .size = 5 << 20, .mtime_ns = 1}},
	    {.type = JR_LINK, .parent = 1, .ino = 3, .name = "data", .name_len = 4},
	    {.type = JR_CHUNK_DIRTY, .ino = 3, .chunk = 1},
	    {.type = JR_SEG_ADD, .seg = {.id = 2, .len = 3 << 20, .payload = 2 << 20, .dev = 1}},
	    {.type = JR_CHUNK_LOC, .ino = 3, .chunk = 1,
	     .loc = {.seg_id = 2, .off = 4096, .len = 1 << 20, .crc = 0xabcd, .gen = 2}},
	    {.type = JR_XATTR_SET, .ino = 3, .name = "user.a", .name_len = 6, .value = "v",
	     .value_len = 1},
	    {.type = JR_CHUNK_ABSENT, .ino = 3, .chunk = 2, .count = 3},
	    {.type = JR_SEG_DEL, .seg = {.id = 2}},
	    {.type = JR_XATTR_DEL, .ino = 3, .name = "user.a", .name_len = 6},
	    {.type = JR_UNLINK, .parent = 1, .name = "data", .name_len = 4},
	    {.type = JR_META, .next_ino = 9, .next_seg = 4},
	};
	int nrec = (int)(sizeof(recs) / sizeof(recs[0]));

	g_snap[g_nsnap++] = (struct jrec){.type = JR_META, .next_ino = 5, .next_seg = 3};
	g_snap[g_nsnap++] = (struct jrec){.type = JR_INODE, .ino = 1, .attr = {.mode = 040755}};
	g_snap[g_nsnap++] = (struct jrec){.type = JR_INODE, .ino = 2,
					  .attr = {.mode = 0100600, .size = 4 << 20}};
	g_snap[g_nsnap++] =
	    (struct jrec){.type = JR_LINK, .parent = 1, .ino = 2, .name = "f", .name_len = 1};
	g_snap[g_nsnap++] = (struct jrec){.type = JR_SEG_ADD,
					  .seg = {.id = 1, .len = 2 << 20, .payload = 1 << 20}};
	g_snap[g_nsnap++] = (struct jrec){.type = JR_CHUNK_LOC, .ino = 2, .chunk = 0,
					  .loc = {.seg_id = 1, .off = 4096, .len = 1 << 20, .gen = 1}};
	snprintf(state, sizeof(state), "%s/state", dir);
	cfg.dir = state;
	if (jrnl_open(&cfg, &j, err, sizeof(err)) || jrnl_recover(j, ignore, NULL, &info, err,
								    sizeof(err)) ||
	    jrnl_start(j, snap, NULL)) {
		fprintf(stderr, "journal: %s\n", err);
		exit(1);
	}
	for (int i = 0; i < nrec; i++) {
		size_t l = jrnl_encode(&recs[i], buf);
		char n[32];
		snprintf(n, sizeof(n), "type-%02u", recs[i].type);
		put("journal_record", n, buf, l);
		if (jrnl_append(j, &recs[i]))
			exit(1);
	}
	if (jrnl_append_tx(j, recs, 2))
		exit(1);
	{
		size_t l;
		uint8_t *tx = jrnl_encode_tx(recs, 3, &l);
		put("journal_record", "tx-3", tx, l);
		free(tx);
	}
	jrnl_position(j, &gen, &(uint64_t){0});
	jrnl_close(j, 0);
	snprintf(name, sizeof(name), "checkpoint.%016" PRIx64, gen);
	snprintf(path, sizeof(path), "%s/%s", state, name);
	ck = slurp(path, &ckl);
	snprintf(name, sizeof(name), "journal.%016" PRIx64, gen);
	snprintf(path, sizeof(path), "%s/%s", state, name);
	jn = slurp(path, &jnl);
	if (!ck || !jn)
		exit(1);
	put("checkpoint", "real", ck, ckl);
	both = malloc(4 + ckl + jnl);
	memcpy(both, &(uint32_t){(uint32_t)ckl}, 4);
	memcpy(both + 4, ck, ckl);
	memcpy(both + 4 + ckl, jn, jnl);
	put("journal_replay", "real", both, 4 + ckl + jnl);
	/* a torn tail */
	put("journal_replay", "torn", both, 4 + ckl + jnl - 7);
	free(both);
	free(ck);
	free(jn);
	fuzz_empty_dir(dir);
}

static void segment(void)
{
	static const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	struct seg_entry e[2] = {{.ino = 2, .chunk = 0, .gen = 1, .off = 4096, .len = 100, .crc = 7},
				 {.ino = 3, .chunk = 5, .gen = 9, .off = 8192, .len = 4096,
				  .crc = 8}};
	uint64_t body = 8192 + 4096;
	uint32_t flen = seg_footer_len(body, 2);
	size_t len = body + flen;
	uint8_t *seg = calloc(1, len);

	seg_header_encode(seg, uuid, 42);
	memset(seg + 4096, 'a', 100);
	memset(seg + 8192, 'b', 4096);
	seg_footer_encode(seg + body, flen, e, 2);
	put("segment", "two-chunks", seg, len);
	free(seg);
	len = 4096 + seg_footer_len(4096, 0);
	seg = calloc(1, len);
	seg_header_encode(seg, uuid, 43);
	seg_footer_encode(seg + 4096, seg_footer_len(4096, 0), NULL, 0);
	put("segment", "empty", seg, len);
	free(seg);
}

static void s3(void)
{
	/* the first byte picks the parser (fuzz_s3xml.c) */
	puts_seed("s3xml", "error",
		  "\x00<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
		  "<Message>The specified key does not exist.</Message><Key>a/b</Key>"
		  "<RequestId>4442587FB7D0A2F9</RequestId></Error>");
	puts_seed("s3xml", "initiate",
		  "\x01<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult "
		  "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket><Key>seg-1"
		  "</Key><UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>");
	puts_seed("s3xml", "complete",
		  "\x02<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult "
		  "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>http://b/k</Location>"
		  "<Bucket>b</Bucket><Key>k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
		  "</CompleteMultipartUploadResult>");
	puts_seed("s3xml", "complete-error",
		  "\x02<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code>"
		  "<Message>We encountered an internal error.</Message></Error>");
	puts_seed("s3xml", "list-uploads",
		  "\x03<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListMultipartUploadsResult "
		  "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket>"
		  "<NextKeyMarker>p/seg-2</NextKeyMarker><NextUploadIdMarker>x</NextUploadIdMarker>"
		  "<IsTruncated>true</IsTruncated><Upload><Key>p/seg-1</Key><UploadId>abc</UploadId>"
		  "</Upload><Upload><Key>p/seg-2</Key><UploadId>def</UploadId></Upload>"
		  "</ListMultipartUploadsResult>");
	puts_seed("s3xml", "list-objects",
		  "\x04<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
		  "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name><Prefix>p/</Prefix>"
		  "<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
		  "<NextContinuationToken>1ueGcxLPRx1Tr</NextContinuationToken><Contents><Key>p/seg-"
		  "0000000000000001.spw</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
		  "<ETag>\"abc\"</ETag><Size>8392704</Size><StorageClass>STANDARD</StorageClass>"
		  "</Contents><Contents><Key>p/checkpoint</Key><Size>0</Size></Contents>"
		  "</ListBucketResult>");
	puts_seed("s3_headers", "etag", "ETag: \"3858f62230ac3c915f300c664312c11f\"\r\n");
	puts_seed("s3_headers", "retry-after", "Retry-After: 2\r\n");
	puts_seed("s3_headers", "retry-date", "retry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n");
	puts_seed("s3_headers", "content-range", "Content-Range: bytes 0-1048575/8392704\r\n");
	puts_seed("s3_headers", "content-range-empty", "content-range: bytes 0-0/0\r\n");
	puts_seed("s3_headers", "content-length", "Content-Length: 1048576\r\n");
	puts_seed("s3_headers", "region", "x-amz-bucket-region: eu-west-1\r\n");
	puts_seed("credentials", "default",
		  "# comment\n[other]\naws_access_key_id = X\n\n[default]\n"
		  "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\r\n"
		  "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
		  "aws_session_token = FQoGZXIvYXdzEBYaDOqOg\n; note\n");
	puts_seed("options", "tiering",
		  "hot_size=64M,chunk_size=1M,spill_threshold=0.7,low_watermark=0.5,"
		  "hard_watermark=0.9,min_spill_size=2M,io_workers=4,restore=lazy,write_wait=500ms,"
		  "gc_threshold=0.4,log_level=debug");
	puts_seed("options", "s3",
		  "s3=s3:bucket,s3_endpoint=http:x,s3_region=us-east-1,s3_part_size=8M,"
		  "nvme=cold,state_dir=none,journal_sync_ms=0,checkpoint_size=1M");
	puts_seed("sigv4", "list",
		  "/bucket/prefix/seg-0000000000000001.spw\nlist-type=2\nprefix=p/\n"
		  "continuation-token=1ueGcxLPRx1Tr/+=\nuploads\n");
	puts_seed("sigv4", "odd", "/a b/\xc3\xa9~%2F\npartNumber=1\nuploadId=a+b/c\n");
	put("xattr", "pin", "pin\0" "1", 5);
	put("xattr", "pin-newline", "pin\0" "0\n", 6);
	put("xattr", "evict", "evict\0", 6);
	put("xattr", "warm", "warm\0" "x", 6);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	g_top = argv[1];
	mkdir(g_top, 0755);
	journals();
	segment();
	s3();
	return 0;
}

/* mkseeds is linked like the targets; libFuzzer is not linked in */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return 0;
}
