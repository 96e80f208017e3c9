#include "common/crc32c.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* reflected 0x1EDC6F41 */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int have_sse42;
#if defined(__x86_64__)
static void zeros_init(void);
#endif

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1)));
		table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
	zeros_init();
#endif
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= crc;
		crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
		      table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
		      table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return crc;
}

#if defined(__x86_64__)
/*
 * Three streams at once: the crc32 instruction has a latency of three cycles
 * and a throughput of one, so one dependent chain uses a third of the unit.
 * The buffer is cut into three consecutive pieces of LONG (then SHORT) bytes,
 * each piece's crc runs in its own register, and the three are joined by
 * "appending zeros" to the earlier ones: crc(A||B) = shift(crc(A), |B|) ^
 * crc(B) for the raw (unconditioned) register, where shift is a linear map
 * applied with four 256-entry tables (after Mark Adler's crc32c.c).
 */
#define LONG_BLK  8192
#define SHORT_BLK 256
static uint32_t zeros_long[4][256], zeros_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends len zero bytes (len a power of two) to a crc. */
static void zeros_table(uint32_t zeros[4][256], size_t len)
{
	uint32_t odd[32], even[32], row = 1;
	odd[0] = POLY; /* one zero bit */
	for (int n = 1; n < 32; n++, row <<= 1)
		odd[n] = row;
	gf2_square(even, odd); /* two bits */
	gf2_square(odd, even); /* four bits */
	for (;;) {
		gf2_square(even, odd); /* 8 bits = 1 byte, then 2, 4, ... bytes */
		len >>= 1;
		if (!len) {
			memcpy(odd, even, sizeof(odd));
			break;
		}
		gf2_square(odd, even);
		len >>= 1;
		if (!len)
			break;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 0; k < 4; k++)
			zeros[k][n] = gf2_times(odd, n << (8 * k));
}

static void zeros_init(void)
{
	zeros_table(zeros_long, LONG_BLK);
	zeros_table(zeros_short, SHORT_BLK);
}

static inline uint32_t shift(uint32_t zeros[4][256], uint32_t crc)
{
	return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
	       zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
							 size_t len)
{
	uint64_t c0 = crc, c1, c2, v;
	while (len && ((uintptr_t)p & 7)) {
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
		len--;
	}
	for (size_t blk = LONG_BLK; blk >= SHORT_BLK; blk = blk == LONG_BLK ? SHORT_BLK : 0) {
		uint32_t(*z)[256] = blk == LONG_BLK ? zeros_long : zeros_short;
		while (len >= 3 * blk) {
			const unsigned char *end = p + blk;
			c1 = c2 = 0;
			do {
				memcpy(&v, p, 8);
				c0 = __builtin_ia32_crc32di(c0, v);
				memcpy(&v, p + blk, 8);
				c1 = __builtin_ia32_crc32di(c1, v);
				memcpy(&v, p + 2 * blk, 8);
				c2 = __builtin_ia32_crc32di(c2, v);
				p += 8;
			} while (p < end);
			c0 = shift(z, (uint32_t)c0) ^ (uint32_t)c1;
			c0 = shift(z, (uint32_t)c0) ^ (uint32_t)c2;
			p += 2 * blk;
			len -= 3 * blk;
		}
	}
	while (len >= 8) {
		memcpy(&v, p, 8);
		c0 = __builtin_ia32_crc32di(c0, v);
		p += 8;
		len -= 8;
	}
	crc = (uint32_t)c0;
	while (len--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&table_once, table_init);
	crc = ~crc;
#if defined(__x86_64__)
	if (have_sse42)
		return ~crc_hw(crc, buf, len);
#endif
	return ~crc_sw(crc, buf, len);
}
