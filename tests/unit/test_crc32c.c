/*
 * test_crc32c — Castagnoli CRC against the standard check value, the
 * RFC 3720 B.4 vectors and a bitwise reference implementation (random
 * buffers, lengths 0..4100, odd alignments; long buffers through the
 * three-stream path), and incremental == one-shot.
 * The module picks SSE4.2 when the CPU has it; whichever path it picked is
 * the one compared against the reference here.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/crc32c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bit at a time, reflected polynomial 0x82F63B78: obviously correct, slow. */
static uint32_t ref_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
	}
	return ~crc;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static void fill_random(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(rnd() >> 56);
}

static void test_check_value(void **state)
{
	assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(ref_crc32c(0, "123456789", 9), 0xE3069283u);
	/* empty input leaves the crc unchanged */
	assert_int_equal(crc32c(0, "", 0), 0);
	assert_int_equal(crc32c(0x12345678u, "", 0), 0x12345678u);
	assert_int_equal(crc32c(0, NULL, 0), 0);
	/* one byte */
	assert_int_equal(crc32c(0, "a", 1), ref_crc32c(0, "a", 1));
	assert_int_equal(crc32c(0, "a", 1), 0xC1D04330u);
}

static void test_rfc3720_vectors(void **state)
{
	unsigned char buf[32];

	memset(buf, 0, sizeof(buf));
	assert_int_equal(crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	assert_int_equal(crc32c(0, buf, 32), 0x113FDB5Cu);

	/* the reference agrees, so it can judge the random cases below */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(ref_crc32c(0, buf, 32), 0x8A9136AAu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	assert_int_equal(ref_crc32c(0, buf, 32), 0x113FDB5Cu);
}

/* An iSCSI read PDU header from RFC 3720 B.4 (48 bytes). */
static void test_rfc3720_iscsi_pdu(void **state)
{
	static const unsigned char pdu[48] = {
	    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
	    0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	assert_int_equal(crc32c(0, pdu, sizeof(pdu)), 0xD9963A56u);
	assert_int_equal(ref_crc32c(0, pdu, sizeof(pdu)), 0xD9963A56u);
}

static void test_matches_reference(void **state)
{
	enum { MAXLEN = 4100, ALIGN = 16 };
	unsigned char *raw = malloc(MAXLEN + ALIGN);
	unsigned long mismatches = 0;

	assert_non_null(raw);
	for (size_t len = 0; len <= MAXLEN; len++) {
		size_t a = len % ALIGN; /* every alignment 0..15 over the lengths */
		unsigned char *p = raw + a;
		uint32_t seed = (len % 3 == 0) ? 0 : (uint32_t)rnd();
		uint32_t got, want;

		fill_random(p, len);
		got = crc32c(seed, p, len);
		want = ref_crc32c(seed, p, len);
		if (got != want) {
			if (mismatches++ < 5)
				print_error("len %zu align %zu seed %08x: got %08x want %08x\n",
					    len, a, seed, got, want);
		}
	}
	/* random lengths and alignments too */
	for (int i = 0; i < 2000; i++) {
		size_t len = rnd() % (MAXLEN + 1), a = rnd() % ALIGN;
		unsigned char *p = raw + a;
		fill_random(p, len);
		if (crc32c(0, p, len) != ref_crc32c(0, p, len))
			mismatches++;
	}
	free(raw);
	assert_int_equal(mismatches, 0);
}

/* Long buffers take the three-stream path (pieces of 8 KiB and 256 B joined
 * by the zero-append tables): every length around the piece boundaries, odd
 * alignments, and a 1 MiB buffer, against the reference. */
static void test_long_buffers_match_reference(void **state)
{
	static const size_t base[] = {3 * 256, 3 * 8192, 2 * 3 * 8192 + 3 * 256};
	enum { MAX = 1 << 20 };
	unsigned char *raw = malloc(MAX + 16);
	unsigned long mismatches = 0;

	assert_non_null(raw);
	fill_random(raw, MAX + 16);
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		for (size_t len = base[i] - 9; len <= base[i] + 9; len++)
			for (size_t a = 0; a < 8; a += 3) {
				uint32_t seed = (uint32_t)rnd();
				if (crc32c(seed, raw + a, len) != ref_crc32c(seed, raw + a, len))
					mismatches++;
			}
	if (crc32c(0, raw + 1, MAX) != ref_crc32c(0, raw + 1, MAX))
		mismatches++;
	/* split anywhere: the join of two long pieces is the whole */
	uint32_t c = crc32c(0, raw + 5, 30001);
	if (crc32c(c, raw + 5 + 30001, MAX - 30001) != crc32c(0, raw + 5, MAX))
		mismatches++;
	free(raw);
	assert_int_equal(mismatches, 0);
}

static void test_incremental(void **state)
{
	enum { LEN = 9000 };
	unsigned char *buf = malloc(LEN + 1);
	uint32_t whole;

	assert_non_null(buf);
	fill_random(buf + 1, LEN); /* odd base address */
	whole = crc32c(0, buf + 1, LEN);
	assert_int_equal(whole, ref_crc32c(0, buf + 1, LEN));

	/* every split point of a short prefix, then random multi-way splits */
	for (size_t cut = 0; cut <= 70; cut++) {
		uint32_t c = crc32c(0, buf + 1, cut);
		c = crc32c(c, buf + 1 + cut, 70 - cut);
		assert_int_equal(c, crc32c(0, buf + 1, 70));
	}
	for (int iter = 0; iter < 500; iter++) {
		size_t pos = 0;
		uint32_t c = 0;
		while (pos < LEN) {
			size_t step = rnd() % 97; /* includes empty steps */
			if (step > LEN - pos)
				step = LEN - pos;
			c = crc32c(c, buf + 1 + pos, step);
			pos += step;
		}
		assert_int_equal(c, whole);
	}
	free(buf);
}

static void test_single_bit_flips_detected(void **state)
{
	unsigned char buf[256];
	uint32_t base;

	fill_random(buf, sizeof(buf));
	base = crc32c(0, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf) * 8; i++) {
		buf[i / 8] ^= (unsigned char)(1u << (i % 8));
		assert_int_not_equal(crc32c(0, buf, sizeof(buf)), base);
		buf[i / 8] ^= (unsigned char)(1u << (i % 8));
	}
	assert_int_equal(crc32c(0, buf, sizeof(buf)), base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_check_value),
	    cmocka_unit_test(test_rfc3720_vectors),
	    cmocka_unit_test(test_rfc3720_iscsi_pdu),
	    cmocka_unit_test(test_matches_reference),
	    cmocka_unit_test(test_long_buffers_match_reference),
	    cmocka_unit_test(test_incremental),
	    cmocka_unit_test(test_single_bit_flips_detected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
