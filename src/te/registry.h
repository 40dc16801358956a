/* Registered local buffers: ranges a client may use for zero-copy calls.
 * Thread-safe. A range in use by a transfer cannot be unregistered (BUSY).
 * Each range records whether it is GPU memory, and on which device, so that a
 * transfer can pick the nvlink transport without asking the driver again. */
#ifndef EGM_TE_REGISTRY_H
#define EGM_TE_REGISTRY_H

#include <stddef.h>
#include <egmstore/status.h>

typedef struct egm_registry egm_registry_t;

egm_status_t egm__registry_create(egm_registry_t **registry_p);
void egm__registry_destroy(egm_registry_t *registry);
/* Overlapping an existing range -> EGM_ERR_EXISTS; len 0 or NULL -> INVALID_ARG.
 * The device comes from egm__cuda_pointer_device (host without a driver). */
egm_status_t egm__registry_add(egm_registry_t *registry, void *addr, size_t len);
/* Not registered -> NOT_FOUND; in use -> BUSY. */
egm_status_t egm__registry_remove(egm_registry_t *registry, void *addr);
/* [addr, addr+len) must lie inside one registered range -> takes a use reference
 * on it (EGM_ERR_NOT_REGISTERED otherwise). */
egm_status_t egm__registry_acquire(egm_registry_t *registry, const void *addr, size_t len);
void egm__registry_release(egm_registry_t *registry, const void *addr);
/* Device of the registered range holding [addr, addr+len): GPU ordinal, or -1
 * for host memory. Not inside one range -> EGM_ERR_NOT_REGISTERED. */
egm_status_t egm__registry_device(egm_registry_t *registry, const void *addr, size_t len,
                                  int *device_p);

#endif
