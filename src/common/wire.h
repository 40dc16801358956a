/* The wire codec: fixed-width little-endian integers and 128-bit ids, packed
 * byte by byte, so that a format never depends on the host's byte order and no
 * struct layout ever reaches the wire. Every binary format of egmstore is
 * written with these (the RPC frame header, the tcp data server's requests and
 * replies, the fd broker's messages, fixed64 fields of protobuf). Inline: they
 * run on every frame. p must have room for (put) or hold (get) the width. */
#ifndef EGM_COMMON_WIRE_H
#define EGM_COMMON_WIRE_H

#include <stdint.h>
#include "common/id.h"

static inline void egm__wire_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void egm__wire_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void egm__wire_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t egm__wire_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t egm__wire_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t egm__wire_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A 128-bit id as 16 bytes: hi then lo, each little-endian. */
static inline void egm__wire_put_id(uint8_t *p, egm_id_t id)
{
    egm__wire_put_u64(p, id.hi);
    egm__wire_put_u64(p + 8, id.lo);
}

static inline egm_id_t egm__wire_get_id(const uint8_t *p)
{
    egm_id_t id = {.hi = egm__wire_get_u64(p), .lo = egm__wire_get_u64(p + 8)};
    return id;
}

#endif
