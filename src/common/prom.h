/* The Prometheus text exposition format (0.0.4): the one writer of the master's
 * /metrics and the client's (a provider's /metrics, egm_client_metrics).
 * Metric names follow one scheme, docs/metrics.md: egm_<component>_<what>
 * [_<unit>][_total], component master or client, base units (seconds, bytes),
 * counters and only counters ending in _total. */
#ifndef EGM_COMMON_PROM_H
#define EGM_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>
#include "common/textbuf.h"

/* The content type of the text this writes. */
#define EGM_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum {
    EGM_PROM_COUNTER,
    EGM_PROM_GAUGE,
    EGM_PROM_HISTOGRAM,
} egm_prom_type_t;

/* The "# HELP" and "# TYPE" lines that open a metric family (help: '\' and
 * newlines are escaped). */
void egm__prom_family(egm_textbuf_t *t, const char *name, egm_prom_type_t type, const char *help);
/* One sample: `name{l1="v1",...} value`. labels: NULL, or label names and
 * values in turn, ended by NULL; values are escaped ('\', '"', newline).
 * Integers are written exactly; doubles in the shortest text that reads back
 * as the same double (NaN, +Inf, -Inf as Prometheus spells them). */
void egm__prom_sample_u64(egm_textbuf_t *t, const char *name, const char *const *labels,
                          uint64_t value);
void egm__prom_sample_double(egm_textbuf_t *t, const char *name, const char *const *labels,
                             double value);
/* A family of one unlabelled sample. */
void egm__prom_metric_u64(egm_textbuf_t *t, const char *name, egm_prom_type_t type,
                          const char *help, uint64_t value);
void egm__prom_metric_double(egm_textbuf_t *t, const char *name, egm_prom_type_t type,
                             const char *help, double value);
/* A table of unlabelled integer metrics, written in order by egm__prom_rows
 * (the master's and the client's lists of gauges and counters). */
typedef struct {
    const char *name;
    egm_prom_type_t type;
    const char *help;
    uint64_t value;
} egm_prom_row_t;

void egm__prom_rows(egm_textbuf_t *t, const egm_prom_row_t *rows, size_t n);
/* The samples of one histogram with `labels` (as above): name_bucket for each
 * of the n bounds (`le` as given in bound_text, ascending) and +Inf, counted
 * cumulatively from counts[0..n] (per bucket, counts[n] above every bound),
 * then name_sum and name_count (equal to the +Inf bucket, so that the two
 * always agree within a scrape). */
void egm__prom_histogram(egm_textbuf_t *t, const char *name, const char *const *labels,
                         const char *const *bound_text, const uint64_t *counts, size_t n,
                         double sum);

#endif
