/*
 * fuzz_segment — the segment decoders (tier/segment/segment.h): the input is a
 * whole segment. Written against the public seg_header_decode,
 * seg_trailer_decode and seg_footer_decode only, so format changes behind
 * them are fuzzed as they land.
 * Invariants: an accepted footer's records lie inside the segment's data
 * area, after the header, aligned for their version (v1 4 KiB, v2 and v3
 * 8 bytes: a v3 record on 4 KiB is the reader's business, not the
 * footer's), non-empty, a v2/v3 record no longer than its chunk plus its
 * map; v2 and v3 entries and count re-encode (seg_footer_encode, which
 * writes v3) to the same bytes, the magic aside for v2; an accepted
 * trailer's footer length fits the segment; a rejected footer returns no
 * entries; an accepted v3 header re-encodes to the same bytes when its
 * reserved bytes are zero.
 */
#include "fuzz.h"
#include "tier/segment/segment.h"

#include <errno.h>
#include <string.h>

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t uuid[16], *copy, *hdr;
	uint64_t id;
	uint32_t flen = 0, n = 12345, hver = 0, ver = 0;
	struct seg_entry *e = (struct seg_entry *)&n; /* must be replaced or left alone */
	int ret;

	if (size >= SEG_HDR_SIZE) {
		hdr = malloc(SEG_HDR_SIZE);
		memcpy(hdr, data, SEG_HDR_SIZE);
		ret = seg_header_decode(hdr, uuid, &id, &hver);
		FUZZ_CHECK(ret == 0 || ret == -EIO || ret == -ENOTSUP, "header: %d", ret);
		FUZZ_CHECK(ret < 0 || (hver >= 1 && hver <= 3), "header version %u", hver);
		if (ret == 0 && hver == SEG_VERSION && all_zero(hdr + 40, SEG_HDR_SIZE - 40 - 4) && all_zero(hdr + 12, 4)) {
			uint8_t *again = malloc(SEG_HDR_SIZE);
			seg_header_encode(again, uuid, id);
			FUZZ_CHECK(!memcmp(again, hdr, SEG_HDR_SIZE), "header does not re-encode");
			free(again);
		}
		free(hdr);
	}
	if (size < SEG_TRAILER_SIZE)
		return 0;
	copy = malloc(size);
	memcpy(copy, data, size);
	ret = seg_trailer_decode(copy + size - SEG_TRAILER_SIZE, size, &flen, &ver);
	FUZZ_CHECK(ret == 0 || ret == -EIO, "trailer: %d", ret);
	if (ret < 0)
		goto out;
	FUZZ_CHECK(flen >= SEG_TRAILER_SIZE && flen <= size && flen <= SEG_FOOTER_MAX,
		   "footer_len %u in a segment of %zu", flen, size);
	FUZZ_CHECK(ver >= 1 && ver <= 3, "trailer version %u", ver);
	ret = seg_footer_decode(copy + size - flen, flen, size, ver, &e, &n);
	FUZZ_CHECK(ret == 0 || ret == -EIO || ret == -ENOMEM, "footer: %d", ret);
	if (ret < 0) {
		FUZZ_CHECK(e == (struct seg_entry *)&n && n == 12345, "a rejected footer set output");
		goto out;
	}
	{
		uint64_t data_end = size - flen;
		size_t raw = (size_t)n * (ver == 1 ? SEG_ENTRY_SIZE_V1 : SEG_ENTRY_SIZE) +
			     SEG_TRAILER_SIZE;
		uint32_t align = ver == 1 ? SEG_ALIGN : SEG_REC_ALIGN;
		uint8_t *again;

		for (uint32_t i = 0; i < n; i++) {
			FUZZ_CHECK(e[i].off >= SEG_HDR_SIZE && e[i].off % align == 0 &&
					   e[i].len > 0 && e[i].off <= data_end &&
					   e[i].len <= data_end - e[i].off,
				   "entry %u [%llu, +%u) outside the data area [4096, %llu)", i,
				   (unsigned long long)e[i].off, e[i].len,
				   (unsigned long long)data_end);
			FUZZ_CHECK(ver != 1 || (e[i].flags == 0 && e[i].chunk_len == e[i].len),
				   "v1 entry %u decoded with flags %u", i, e[i].flags);
		}
		FUZZ_CHECK(raw <= flen, "%u entries in %u footer bytes", n, flen);
		if (ver == 1) {
			free(e);
			goto out;
		}
		again = malloc(flen);
		seg_footer_encode(again, flen, e, n);
		/* the padding is covered by the crc but not required to be zero */
		FUZZ_CHECK(!memcmp(again + flen - raw, copy + size - raw, raw - 16) &&
				   !memcmp(again + flen - 12, copy + size - 12, ver == 3 ? 12 : 4),
			   "entries, count and trailer do not re-encode to their bytes");
		if (ver == 3 && all_zero(copy + size - flen, flen - raw))
			FUZZ_CHECK(!memcmp(again, copy + size - flen, flen),
				   "footer does not re-encode to its bytes");
		free(again);
		free(e);
	}
out:
	free(copy);
	return 0;
}
