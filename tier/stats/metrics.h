/*
 * metrics — the Prometheus text file (histograms: common/hist.h).
 * metrics_start() runs one thread that rewrites cfg->metrics atomically
 * (temp file + rename) every metrics_interval; metrics_stop() joins it and
 * writes a last sample.
 */
#ifndef SPW_METRICS_H
#define SPW_METRICS_H

#include <stdio.h>

struct tier;
int metrics_start(struct tier *t);
void metrics_stop(struct tier *t);
/* Render all metrics into f (used by the thread and by tests). */
void metrics_write(struct tier *t, FILE *f);

#endif
