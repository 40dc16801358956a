/* protobuf-c glue: tracked allocator, pack/unpack, id conversion. */
#include "rpc/proto_util.h"

#include "common/alloc.h"
#include "common/log.h"

#include <stdint.h>

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    /* protobuf-c may ask for 0 bytes (empty repeated fields); keep it non-NULL. */
    return egm_malloc(size ? size : 1, "protobuf");
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    egm_free(ptr);
}

ProtobufCAllocator egm__pb_allocator = {
    .alloc = pb_alloc,
    .free = pb_free,
    .allocator_data = NULL,
};

/* Unpacked messages live in an arena: protobuf-c allocates once per message,
 * repeated field and string (five or more blocks per key of a KeysReply), and a
 * bump pointer is far cheaper than malloc+free for each. protobuf-c's first
 * allocation in an unpack is always the top message itself, so the arena
 * header sits just before it and egm__pb_free finds it from the message. */
#define ARENA_MAGIC 0x65676d6172656e61ull /* "egmarena" */
#define ARENA_ALIGN 16
#define ARENA_MIN_CHUNK 4096

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap; /* bytes of data[] */
    uint64_t pad;     /* keeps data[] 16-byte aligned */
    unsigned char data[];
} arena_chunk_t;

typedef struct {
    uint64_t magic;
    arena_chunk_t *chunks; /* newest first; the last one holds this header */
} arena_t;

_Static_assert(sizeof(arena_chunk_t) % ARENA_ALIGN == 0, "arena data stays aligned");
_Static_assert(sizeof(arena_t) == ARENA_ALIGN, "message follows the header aligned");

static void *arena_alloc(void *data, size_t size)
{
    arena_t *arena = data;
    arena_chunk_t *c = arena->chunks;
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);

    if (need == 0)
        need = ARENA_ALIGN; /* empty repeated fields still get a distinct pointer */
    if (need < size || need > c->cap - c->used) {
        size_t cap = c->cap * 2 > need ? c->cap * 2 : need;
        if (need < size || cap > SIZE_MAX - sizeof(arena_chunk_t))
            return NULL;
        arena_chunk_t *grown = egm_malloc(sizeof(arena_chunk_t) + cap, "protobuf");
        if (grown == NULL)
            return NULL;
        grown->next = c;
        grown->used = 0;
        grown->cap = cap;
        arena->chunks = c = grown;
    }
    void *p = c->data + c->used;
    c->used += need;
    return p;
}

static void arena_free(void *data, void *ptr)
{
    /* Everything goes at once in arena_destroy. */
    (void)data;
    (void)ptr;
}

static void arena_destroy(arena_t *arena)
{
    arena_chunk_t *c = arena->chunks;
    arena->magic = 0;
    while (c != NULL) {
        arena_chunk_t *next = c->next;
        egm_free(c); /* the first chunk, holding `arena`, is freed last */
        c = next;
    }
}

egm_status_t egm__pb_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                            ProtobufCMessage **msg_p)
{
    ProtobufCMessage *msg;

    *msg_p = NULL;
    if (desc == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "unpack: no message descriptor");
    /* A decoded message takes a few times its wire size; more chunks come as needed. */
    size_t cap = len < SIZE_MAX / 8 ? 4 * len + desc->sizeof_message + 2 * sizeof(arena_t) : 0;
    if (cap < ARENA_MIN_CHUNK)
        cap = ARENA_MIN_CHUNK;
    arena_chunk_t *first = cap > 0 ? egm_malloc(sizeof(arena_chunk_t) + cap, "protobuf") : NULL;
    if (first == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "cannot decode %s (%zu bytes): out of memory",
                              desc->name, len);
    first->next = NULL;
    first->cap = cap;
    first->used = sizeof(arena_t);
    arena_t *arena = (arena_t *)first->data;
    arena->magic = ARENA_MAGIC;
    arena->chunks = first;
    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_free, .allocator_data = arena};
    msg = protobuf_c_message_unpack(desc, &alloc, len, buf);
    if (msg == NULL) {
        arena_destroy(arena);
        return egm__set_error(EGM_ERR_PROTOCOL, "cannot decode %s (%zu bytes)", desc->name, len);
    }
    if ((unsigned char *)msg != first->data + sizeof(arena_t)) {
        /* A protobuf-c that allocates something before the message: egm__pb_free
         * could not find the arena, so refuse rather than leak or crash. */
        arena_destroy(arena);
        return egm__set_error(EGM_ERR_INTERNAL, "decode %s: unexpected protobuf-c allocation order",
                              desc->name);
    }
    *msg_p = msg;
    return EGM_OK;
}

void egm__pb_free(ProtobufCMessage *msg)
{
    if (msg == NULL)
        return;
    arena_t *arena = (arena_t *)((unsigned char *)msg - sizeof(arena_t));
    if (arena->magic != ARENA_MAGIC) {
        egm_error("egm__pb_free: %s was not decoded by egm__pb_unpack; leaked",
                  msg->descriptor ? msg->descriptor->name : "message");
        return;
    }
    arena_destroy(arena);
}

egm_status_t egm__pb_pack(const ProtobufCMessage *msg, uint8_t **buf_p, size_t *len_p)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = egm_malloc(len ? len : 1, "rpc_pack");
    size_t packed;

    *buf_p = NULL;
    *len_p = 0;
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "pack %s: cannot allocate %zu bytes",
                              msg->descriptor->name, len);
    packed = protobuf_c_message_pack(msg, buf);
    if (packed != len) {
        egm_free(buf);
        return egm__set_error(EGM_ERR_INTERNAL, "pack %s: packed %zu bytes, expected %zu",
                              msg->descriptor->name, packed, len);
    }
    *buf_p = buf;
    *len_p = len;
    return EGM_OK;
}

void egm__id_to_pb(egm_id_t id, Egm__Id *pb)
{
    egm__id__init(pb);
    pb->hi = id.hi;
    pb->lo = id.lo;
}

egm_id_t egm__id_from_pb(const Egm__Id *pb)
{
    egm_id_t id = {0, 0};

    if (pb != NULL) {
        id.hi = pb->hi;
        id.lo = pb->lo;
    }
    return id;
}
