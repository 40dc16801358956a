/* Prometheus text exposition (see prom.h). */
#include "common/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_name(egm_prom_type_t type)
{
    switch (type) {
    case EGM_PROM_COUNTER:
        return "counter";
    case EGM_PROM_GAUGE:
        return "gauge";
    case EGM_PROM_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* text with '\' and newlines (and, in label values, '"') escaped. */
static void escaped(egm_textbuf_t *t, const char *text, int quote)
{
    for (const char *p = text; *p != '\0';) {
        size_t run = strcspn(p, quote ? "\\\n\"" : "\\\n");
        egm__textbuf_append(t, p, run);
        p += run;
        if (*p != '\0') {
            egm__textbuf_append(t, *p == '\n' ? "\\n" : *p == '"' ? "\\\"" : "\\\\", 2);
            p++;
        }
    }
}

void egm__prom_family(egm_textbuf_t *t, const char *name, egm_prom_type_t type, const char *help)
{
    egm__textbuf_printf(t, "# HELP %s ", name);
    escaped(t, help, 0);
    egm__textbuf_printf(t, "\n# TYPE %s %s\n", name, type_name(type));
}

/* name{labels[,le="..."]} and the space before the value. */
static void sample_name(egm_textbuf_t *t, const char *name, const char *suffix,
                        const char *const *labels, const char *le)
{
    int n = 0;
    egm__textbuf_printf(t, "%s%s", name, suffix);
    for (const char *const *l = labels; l != NULL && l[0] != NULL && l[1] != NULL; l += 2) {
        egm__textbuf_printf(t, "%s%s=\"", n++ ? "," : "{", l[0]);
        escaped(t, l[1], 1);
        egm__textbuf_append(t, "\"", 1);
    }
    if (le != NULL)
        egm__textbuf_printf(t, "%sle=\"%s\"", n++ ? "," : "{", le);
    egm__textbuf_append(t, n > 0 ? "} " : " ", n > 0 ? 2 : 1);
}

static void double_text(egm_textbuf_t *t, double value)
{
    char text[32];
    if (isnan(value)) {
        egm__textbuf_append(t, "NaN", 3);
        return;
    }
    if (isinf(value)) {
        egm__textbuf_append(t, value > 0 ? "+Inf" : "-Inf", 4);
        return;
    }
    snprintf(text, sizeof(text), "%.15g", value);
    if (strtod(text, NULL) != value)
        snprintf(text, sizeof(text), "%.17g", value);
    egm__textbuf_append(t, text, strlen(text));
}

void egm__prom_sample_u64(egm_textbuf_t *t, const char *name, const char *const *labels,
                          uint64_t value)
{
    sample_name(t, name, "", labels, NULL);
    egm__textbuf_printf(t, "%llu\n", (unsigned long long)value);
}

void egm__prom_sample_double(egm_textbuf_t *t, const char *name, const char *const *labels,
                             double value)
{
    sample_name(t, name, "", labels, NULL);
    double_text(t, value);
    egm__textbuf_append(t, "\n", 1);
}

void egm__prom_metric_u64(egm_textbuf_t *t, const char *name, egm_prom_type_t type,
                          const char *help, uint64_t value)
{
    egm__prom_family(t, name, type, help);
    egm__prom_sample_u64(t, name, NULL, value);
}

void egm__prom_metric_double(egm_textbuf_t *t, const char *name, egm_prom_type_t type,
                             const char *help, double value)
{
    egm__prom_family(t, name, type, help);
    egm__prom_sample_double(t, name, NULL, value);
}

void egm__prom_rows(egm_textbuf_t *t, const egm_prom_row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        egm__prom_metric_u64(t, rows[i].name, rows[i].type, rows[i].help, rows[i].value);
}

void egm__prom_histogram(egm_textbuf_t *t, const char *name, const char *const *labels,
                         const char *const *bound_text, const uint64_t *counts, size_t n,
                         double sum)
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= n; b++) {
        cumulative += counts[b];
        sample_name(t, name, "_bucket", labels, b < n ? bound_text[b] : "+Inf");
        egm__textbuf_printf(t, "%llu\n", (unsigned long long)cumulative);
    }
    sample_name(t, name, "_sum", labels, NULL);
    double_text(t, sum);
    egm__textbuf_append(t, "\n", 1);
    sample_name(t, name, "_count", labels, NULL);
    egm__textbuf_printf(t, "%llu\n", (unsigned long long)cumulative);
}
