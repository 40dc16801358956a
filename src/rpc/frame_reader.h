/* Incremental frame reader: reassembles RPC frames (rpc/frame.h) from bytes
 * as a socket hands them over, partial frames across reads and several frames
 * in one read, as hiredis's redisReader does for RESP. Every end of the RPC
 * reads through one: each connection of the server, the client's pipelined
 * connection, and the client's first exchange (Auth, Hello) on a fresh one.
 *
 * Two ways in, mixable frame by frame:
 *  - egm__frame_reader_feed: bytes the caller read into its own buffer. A
 *    payload that arrives whole within one feed is handed out in place (no
 *    copy); one that spans feeds is assembled in a buffer of the reader's.
 *  - egm__frame_reader_space + egm__frame_reader_commit: the caller reads the
 *    socket straight into the frame (a large payload without a copy, or
 *    exactly one frame's bytes and nothing after it).
 *
 * Caller-allocated (init/cleanup); one thread at a time. */
#ifndef EGM_RPC_FRAME_READER_H
#define EGM_RPC_FRAME_READER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "rpc/frame.h"

/* Called on each header that decoded, before its payload is read: an error
 * status refuses the frame (as a bad header is refused). */
typedef egm_status_t (*egm_frame_check_t)(void *arg, const egm_frame_header_t *h);

typedef struct {
    /* Settings; the caller may change them between frames. */
    size_t max_payload;      /* longer frames are refused (egm__frame_decode_header) */
    egm_frame_check_t check; /* NULL = none */
    void *check_arg;
    /* The raw bytes of the last header read: after a refusal, the caller may
     * look at them again (its magic, a decode with another limit). */
    uint8_t hdr_buf[EGM_FRAME_HEADER_SIZE];

    /* Private. */
    const char *site; /* egm_malloc site of assembled payloads */
    size_t hdr_got;
    int in_payload; /* header decoded, its payload being read */
    egm_frame_header_t hdr;
    uint8_t *payload; /* assembled payload (egm_malloc'ed), NULL until needed */
    size_t payload_got;
} egm_frame_reader_t;

/* A complete frame. */
typedef struct {
    egm_frame_header_t hdr;
    const uint8_t *payload; /* hdr.length bytes; NULL when the payload is empty */
    /* The payload's buffer when the reader assembled it (then payload == buf):
     * the caller's from now on, freed with egm_free. NULL when payload points
     * into the bytes fed (valid as long as they are) or is empty. */
    uint8_t *buf;
} egm_frame_t;

/* site: the egm_malloc site name of payload buffers (a string literal). */
void egm__frame_reader_init(egm_frame_reader_t *r, size_t max_payload, const char *site);
/* Drops a partial frame (its connection is gone); the reader is ready for a
 * new stream. */
void egm__frame_reader_reset(egm_frame_reader_t *r);
void egm__frame_reader_cleanup(egm_frame_reader_t *r);
/* 1 when part of a frame has been read and the rest has not. */
int egm__frame_reader_mid_frame(const egm_frame_reader_t *r);

/* Reads data[0, n) up to the end of the first frame it completes, and stops
 * there. *used_p says how many bytes were taken (feed the rest again). Returns
 *  - EGM_OK: *frame_p is a complete frame;
 *  - EGM_INPROGRESS: every byte taken, no frame complete yet;
 *  - an error: a header refused by egm__frame_decode_header (PROTOCOL,
 *    VERSION) or by the check, with frame_p->hdr filled as far as it could be
 *    read (hdr_buf holds its bytes), or EGM_ERR_NO_MEMORY for a payload
 *    buffer. The stream cannot be trusted after it; the reader stands before
 *    a next header. */
egm_status_t egm__frame_reader_feed(egm_frame_reader_t *r, const uint8_t *data, size_t n,
                                    size_t *used_p, egm_frame_t *frame_p);
/* Where the next bytes of the frame being read go, and how many it still
 * lacks (first its header's, then its payload's: never past the frame). The
 * payload's buffer is allocated here when needed (EGM_ERR_NO_MEMORY). */
egm_status_t egm__frame_reader_space(egm_frame_reader_t *r, uint8_t **room_p, size_t *len_p);
/* n bytes (at most what space said) were written at the space: the same
 * results as egm__frame_reader_feed. */
egm_status_t egm__frame_reader_commit(egm_frame_reader_t *r, size_t n, egm_frame_t *frame_p);

#endif
