/* Registered local buffers: ranges a client may use for zero-copy calls.
 * Thread-safe. A range in use by a transfer cannot be unregistered (BUSY).
 * Each range records whether it is GPU memory, and on which device, so that a
 * transfer can pick the nvlink transport without asking the driver again. */
#ifndef EGM_TE_REGISTRY_H
#define EGM_TE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct egm_registry egm_registry_t;

/* The device of a registered range of pinned host memory that the GPUs reach
 * at the same address (egm__cuda_pointer_gpu_mapped_host): host memory to
 * every transport (it is < 0), and a GPU copy's end to nvlink. */
#define EGM_DEVICE_MAPPED_HOST (-2)

egm_status_t egm__registry_create(egm_registry_t **registry_p);
void egm__registry_destroy(egm_registry_t *registry);
/* Overlapping an existing range -> EGM_ERR_EXISTS; len 0 or NULL, or host
 * memory with a page not mapped in this process -> INVALID_ARG. The device
 * comes from egm__cuda_pointer_device (host without a driver), or is
 * EGM_DEVICE_MAPPED_HOST. Host memory with a page this process may not write
 * (/proc/self/maps, read at the first get into the range) is a source only,
 * never a destination. */
egm_status_t egm__registry_add(egm_registry_t *registry, void *addr, size_t len);
/* Not registered -> NOT_FOUND; in use -> BUSY. */
egm_status_t egm__registry_remove(egm_registry_t *registry, void *addr);
/* [addr, addr+len) must lie inside one registered range -> takes a use reference
 * on it (EGM_ERR_NOT_REGISTERED otherwise). */
egm_status_t egm__registry_acquire(egm_registry_t *registry, const void *addr, size_t len);
void egm__registry_release(egm_registry_t *registry, const void *addr);
/* egm__registry_acquire of n buffers under one lock; a buffer of len 0 is
 * skipped. acquired[i] says which were taken; at the first that is not inside
 * one registered range it stops and answers EGM_ERR_NOT_REGISTERED, or with
 * for_write at the first in a read-only range EGM_ERR_INVALID_ARG (those
 * before it stay acquired). */
egm_status_t egm__registry_acquire_n(egm_registry_t *registry, void *const *addr, const size_t *len,
                                     size_t n, int for_write, int *acquired);
/* Releases the buffers with acquired[i] set, under one lock. */
void egm__registry_release_n(egm_registry_t *registry, void *const *addr, const int *acquired,
                             size_t n);
/* Device of the registered range holding [addr, addr+len): GPU ordinal,
 * EGM_DEVICE_MAPPED_HOST, or -1 for other host memory. Not inside one range ->
 * EGM_ERR_NOT_REGISTERED. */
egm_status_t egm__registry_device(egm_registry_t *registry, const void *addr, size_t len,
                                  int *device_p);
/* The same, with the range's bounds [*base_p, *end_p): a batch's later buffers
 * inside them have the same device without another lookup (the range cannot be
 * unregistered while the batch holds its buffers acquired). */
egm_status_t egm__registry_device_range(egm_registry_t *registry, const void *addr, size_t len,
                                        int *device_p, uintptr_t *base_p, uintptr_t *end_p);

#endif
