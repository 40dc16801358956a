/* The master daemon's reads of the pool (pool_reader.h). */
#include "repair/pool_reader.h"

#include "common/alloc.h"
#include "common/auth.h"
#include "common/config_int.h"
#include "common/id.h"
#include "common/log.h"
#include "te/te.h"

/* At most this long for a read (io_timeout_ms if shorter). */
#define POOL_READ_TIMEOUT_MS 1000

struct egm_pool_reads {
    egm_te_t *te;
};

/* egm_pool_read_fn */
static egm_status_t pool_read(void *arg, const egm_segment_desc_t *segment, uint64_t offset,
                              void *buf, size_t len)
{
    egm_pool_reads_t *r = arg;
    /* buf: the master's own host memory */
    egm_te_op_t op = {.segment = segment,
                      .offset = offset,
                      .local = buf,
                      .length = len,
                      .dir = EGM_TE_READ,
                      .local_is_host = 1};
    egm_status_t status = egm__te_transfer(r->te, &op, 1);
    if (status != EGM_OK)
        egm_warn("master: reading %zu bytes at %llu of segment %s: %s", len,
                 (unsigned long long)offset, segment->name, egm_last_error());
    return status;
}

egm_status_t egm__pool_reads_create(const egm_config_t *config, egm_pool_reads_t **reads_p,
                                    egm_pool_reader_t *reader_p)
{
    const egm_settings_t *s = egm__config_settings(config);
    char token[EGM_AUTH_TOKEN_MAX + 1];
    egm_pool_reads_t *r = egm_calloc(1, sizeof(*r), "repair.pool_reads");

    *reads_p = NULL;
    *reader_p = (egm_pool_reader_t){0};
    if (r == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for the master's pool reads");
    egm_status_t status = egm__config_auth_token(config, token, sizeof(token));
    egm_te_params_t p = {
        .client_id = egm__id_random(),
        .protocol = s->protocol == EGM_PROTOCOL_NVLINK ? EGM_PROTOCOL_AUTO : s->protocol,
        /* a provider cut off holds the takeover this long */
        .io_timeout_ms =
            s->io_timeout_ms < POOL_READ_TIMEOUT_MS ? (int)s->io_timeout_ms : POOL_READ_TIMEOUT_MS,
        .prewarm_off = 1,
        .auth_token = token};
    if (status == EGM_OK)
        status = egm__te_create(&p, &r->te);
    egm__secure_zero(token, sizeof(token));
    if (status != EGM_OK) {
        egm_free(r);
        return status;
    }
    *reads_p = r;
    *reader_p = (egm_pool_reader_t){.fn = pool_read, .arg = r};
    return EGM_OK;
}

void egm__pool_reads_destroy(egm_pool_reads_t *r)
{
    if (r == NULL)
        return;
    egm__te_destroy(r->te);
    egm_free(r);
}
