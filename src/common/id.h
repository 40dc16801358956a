/* 128-bit random ids (segments, clients). Never reused: 122 random bits. */
#ifndef EGM_COMMON_ID_H
#define EGM_COMMON_ID_H

#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    uint64_t hi;
    uint64_t lo;
} egm_id_t;

#define EGM_ID_STRLEN 37 /* 36 chars + NUL, UUID text form */

/* Random version-4 UUID from getrandom(). */
egm_id_t egm__id_random(void);
int egm__id_is_nil(egm_id_t id);
int egm__id_equal(egm_id_t a, egm_id_t b);
uint64_t egm__id_hash(egm_id_t id);
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into buf of EGM_ID_STRLEN; returns buf. */
char *egm__id_format(egm_id_t id, char *buf);
egm_status_t egm__id_parse(const char *text, egm_id_t *id_p);

#endif
