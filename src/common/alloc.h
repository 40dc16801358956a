/* Allocation through named sites: every allocation names its site. In a
 * tracking build (every test executable; the products of debug and sanitizer
 * builds, or with -DEGM_ALLOC_TRACKING=ON) live counts per site let tests check
 * that everything returns to zero; in the release products these are plain
 * malloc/free (docs/design.md "Allocation tracking"). Thread-safe. */
#ifndef EGM_COMMON_ALLOC_H
#define EGM_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *egm_malloc(size_t size, const char *site);
void *egm_calloc(size_t n, size_t size, const char *site);
/* realloc keeps the site given at first allocation; ptr NULL behaves as egm_malloc. */
void *egm_realloc(void *ptr, size_t size, const char *site);
char *egm_strdup(const char *s, const char *site);
char *egm_strndup(const char *s, size_t n, const char *site);
void egm_free(void *ptr);

/* Tracking builds only (egm_alloc_tracking): the release products do not
 * define these, so code that calls them fails to link there. */
/* Live allocations and bytes over all sites. */
uint64_t egm__alloc_live_count(void);
uint64_t egm__alloc_live_bytes(void);
/* Live allocations of one site (compared by string content). */
uint64_t egm__alloc_live_count_site(const char *site);
/* The next n allocations of a site (malloc, calloc or a realloc of a block
 * it allocated) fail; 0 ends it. For tests of what runs out of memory. */
void egm__alloc_fail_site(const char *site, uint64_t n);
/* Print every site with live allocations to stderr; returns the number of sites. */
int egm__alloc_report(void);

#endif
