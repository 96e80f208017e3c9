/*
 * size — parsing of the value forms mount options take.
 * Sizes: decimal integer with optional K/M/G/T suffix (powers of 1024, an
 * optional trailing "B"/"iB" accepted). Durations: number with ms/s/m/h
 * (plain number = seconds). Fractions: decimal in [0, 1].
 * All return 0 or -EINVAL (malformed) / -ERANGE (overflow). Pure, thread-safe.
 */
#ifndef SPW_SIZE_H
#define SPW_SIZE_H

#include <stdint.h>

int size_parse(const char *s, uint64_t *out);
int duration_parse_ms(const char *s, uint64_t *out_ms);
int fraction_parse(const char *s, double *out);
/* Human-readable size ("1.5G") into buf; returns buf. */
char *size_format(uint64_t v, char *buf, int len);

#endif
