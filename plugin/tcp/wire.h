/* The TCP transport's wire format: every message header, its fields and
 * limits, and the header checksum.  PROTOCOL.md beside this file is the
 * specification (who sends what, when, and what the receiver checks);
 * this header is its one C rendering, shared by the transport and by the
 * corruption harness that attacks it (tests/tcp/test_corrupt.c).  Any
 * change here bumps RN_WIRE_VERSION (railnet/transport.h).
 *
 * Every header starts with the same 8-byte prefix (type, flags, header
 * length, payload length) and ends with a CRC-32C of the bytes before it,
 * so a reader can frame any message, and new types or longer headers fit
 * in later versions.  Fields are in host byte order (both ends run the
 * same build family; the handle's magic would not match otherwise).  No
 * header has implicit padding: the static_asserts pin every size. */
#ifndef RN_TCP_WIRE_H
#define RN_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "railnet/transport.h"
#include "railnet/sock.h"

enum rn_tcp_msg_type {
  RN_TCP_MSG_CTS = 1,      /* clear-to-send: receiver -> sender, control connection */
  RN_TCP_MSG_DATA = 2,     /* a message's header (+ inline payload): sender -> receiver, control */
  RN_TCP_MSG_CHUNK = 3,    /* a piece of a streamed message: sender -> receiver, data stream */
  RN_TCP_MSG_ACK = 4,      /* a streamed message landed whole: receiver -> sender, control */
  RN_TCP_MSG_DOWN = 5,     /* data streams the sender gave up: sender -> receiver, control */
  RN_TCP_MSG_OFFER = 6,    /* where to reconnect them: receiver -> sender, control */
  RN_TCP_MSG_RESUME = 7,   /* first on a moved control connection: both ways */
  RN_TCP_MSG_BYE = 8,      /* the last message of a comm that closed quiescent: both ways */
  RN_TCP_MSG_WANT = 9,     /* a send waits for a clear-to-send: sender -> receiver, control */
  RN_TCP_MSG_OPEN = 10,    /* open the data streams: sender -> receiver, control */
  RN_TCP_MSG_STREAMS = 11, /* where to dial them: receiver -> sender, control */
};

/* DOWN flags. */
enum {
  /* The sender closed every data stream of the comm after writing all it
   * had (they were idle): read each to its end, then they are gone until
   * the next OPEN. */
  RN_TCP_DOWN_IDLE = 1,
};

/* OFFER flags. */
enum {
  RN_TCP_OFFER_CONTROL = 1, /* a way for the control connection, not for data streams */
};

/* DATA flags: at most one is set. */
enum {
  RN_TCP_DATA_EAGER = 1,    /* sent before its match was known: matched by tag */
  RN_TCP_DATA_STREAMED = 2, /* the payload follows as chunks on the data streams */
  RN_TCP_DATA_TOO_BIG = 4,  /* larger than the posted buffer: the receive fails */
  RN_TCP_DATA_ACK = 8,      /* with STREAMED only: acknowledge it (ACK) once it landed whole */
  /* With any of the above: the sender's eager credit runs low, or this
   * message was too large to go eagerly: clear-to-sends should not wait
   * for a batch.  Its absence says the sender does well without them for
   * now. */
  RN_TCP_DATA_CREDIT = 16,
};
#define RN_TCP_DATA_FLAGS (RN_TCP_DATA_EAGER | RN_TCP_DATA_STREAMED | RN_TCP_DATA_TOO_BIG)

#define RN_TCP_RING 64         /* receive groups outstanding per comm (>= NCCL's 32) */
#define RN_TCP_EAGER_WINDOW 64 /* eager messages not yet matched at the sender: < this */
/* Eager sends complete once written, as NCCL's socket transport's sends
 * do: one too big for its buffer fails that receive, and the sender's comm
 * once the sender matches it to its clear-to-send. */
#define RN_TCP_EAGER_WIRE_MAX 65536 /* largest eager payload */
/* Eager payload bytes not yet matched at the sender: at most this, so a
 * receiver holds at most this much for buffers not yet posted.  The
 * sender asks for clear-to-sends (CREDIT) at half of it, so half must
 * hold a batch of them (RN_TCP_CTS_BATCH) for 32 KiB messages and two
 * for 16 KiB ones, or every message carries CREDIT and each
 * clear-to-send costs a sendmsg of its own. */
#define RN_TCP_EAGER_BYTES 524288
#define RN_TCP_MAX_CHUNKS 1024 /* chunks of one streamed message */
#define RN_TCP_CHUNK_WORDS (RN_TCP_MAX_CHUNKS / 64)
/* A CTS's size entries past n: no buffer ever has this size (posted sizes
 * are at most INT_MAX), so a changed n can never pass for a real group. */
#define RN_TCP_NO_BUFFER UINT64_MAX
/* A chunk is sent again at most this many times (once per rail failure). */
#define RN_TCP_MAX_ATTEMPT 255

struct rn_tcp_prefix {
  uint8_t type;  /* enum rn_tcp_msg_type */
  uint8_t flags; /* per type; 0 where none are defined */
  uint16_t hlen; /* header bytes, prefix and checksum included: fixed per type */
  uint32_t plen; /* payload bytes that follow the header */
};

/* Receiver -> sender: group `seq` is posted with n buffers. */
struct rn_tcp_cts {
  struct rn_tcp_prefix p;
  uint64_t seq;                 /* groups count from 0, one CTS each, in order */
  uint64_t sizes[RN_MAX_RECVS]; /* posted bytes (<= INT_MAX); RN_TCP_NO_BUFFER past n */
  uint32_t msg;                 /* control messages in this direction count from 0 */
  uint32_t n;                   /* 1 .. RN_MAX_RECVS */
  int32_t tags[RN_MAX_RECVS];   /* 0 past n */
  uint32_t reserved;            /* 0 */
  uint32_t crc;
};

/* Sender -> receiver: one message.  plen inline payload bytes follow.
 * Every message that fills a buffer (a DATA header, or a chunk with
 * CLAIM) says which send of its tag it is (nth: the matching rule's k)
 * and which of the comm's filling messages (claim: 0, 1, 2, ... in send
 * order), so the receiver can check each against its own posted buffers
 * whatever order the control connection and the data streams deliver
 * them in, and can tell that an earlier one is still missing. */
struct rn_tcp_data {
  struct rn_tcp_prefix p;
  uint64_t seq;  /* group; 0 when EAGER */
  uint64_t size; /* message bytes */
  uint32_t msg;  /* control messages in this direction count from 0 */
  int32_t tag;
  uint32_t idx;   /* buffer in the group; 0 when EAGER */
  uint32_t grid;  /* STREAMED: bytes per chunk; else 0 */
  uint32_t nth;   /* sends of this tag before it, modulo 2^32 */
  uint32_t claim; /* filling messages of the comm before it, modulo 2^32 */
  uint32_t reserved;
  uint32_t crc;
};

/* Sender -> receiver on a data stream: chunk `index` of buffer idx of
 * group seq, covering [offset, offset + plen) of a `total`-byte message
 * cut on a grid of `grid` bytes. */
struct rn_tcp_chunk {
  struct rn_tcp_prefix p;
  uint64_t seq;
  uint64_t total;
  uint64_t offset; /* index * grid */
  uint32_t idx;
  uint32_t index;
  uint32_t grid;
  uint32_t attempt; /* 0 the first copy; n > 0 the n-th re-send after a rail failed */
  /* With CLAIM: the message's tag, nth and claim as a DATA header would
   * carry them; 0 without. */
  int32_t tag;
  uint32_t nth;
  uint32_t claim;
  uint32_t crc;
};

/* CHUNK flags. */
enum {
  /* The chunk claims its buffer: no DATA header announces the message
   * (the sender's data streams were open when it was sent), and the
   * first of its chunks to arrive matches it. */
  RN_TCP_CHUNK_CLAIM = 1,
  RN_TCP_CHUNK_ACK = 2, /* with CLAIM only: acknowledge the message (ACK) once it landed whole */
};
#define RN_TCP_CHUNK_FLAGS (RN_TCP_CHUNK_CLAIM | RN_TCP_CHUNK_ACK)

/* Receiver -> sender: every byte of the streamed message in buffer idx of
 * group seq has landed; the send completes (its buffer is free) only now,
 * so until then its chunks can be sent again over another rail. */
struct rn_tcp_ack {
  struct rn_tcp_prefix p;
  uint64_t seq;
  uint32_t msg; /* control messages in this direction count from 0 (shared with CTS) */
  uint32_t idx;
  uint32_t reserved;
  uint32_t crc;
};

/* Sender -> receiver: the sender took these data streams out (their rail
 * failed) and sends what they carried again over the others; the
 * receiver stops reading them, so nothing of theirs lands from now on. */
struct rn_tcp_down {
  struct rn_tcp_prefix p;
  uint32_t msg;     /* control messages in this direction count from 0 (shared with DATA) */
  uint32_t streams; /* bit i: data stream i; nonzero, below 1 << N */
  uint32_t reserved;
  uint32_t crc;
};

/* Receiver -> sender: connect `streams` again (the streams of one rail
 * the sender took out) as one connection of that many data streams, to
 * addr with this nonce; the receiver's own listener admits only it. */
struct rn_tcp_offer {
  struct rn_tcp_prefix p;
  uint64_t nonce;
  uint32_t msg;     /* control messages in this direction count from 0 (shared with CTS, ACK) */
  uint32_t streams; /* bit i: data stream i */
  struct rn_wire_addr addr;
  uint32_t crc;
};

/* Both ways, the first bytes of a control connection that replaces a lost
 * one: the control bytes this side writes next start at stream offset
 * `from` (bytes it wrote since the comm began; the reader drops those it
 * already read on the old connection). */
struct rn_tcp_resume {
  struct rn_tcp_prefix p;
  uint64_t from;     /* stream offset of the next byte written */
  uint64_t received; /* control bytes this side has read so far */
  uint32_t epoch;    /* 1 for the first move of the comm, 2 for the next, ... */
  uint32_t crc;
};

/* Both ways, the last control message of a side that closed its comm with
 * nothing in flight, so the connection may serve a later comm between the
 * same two processes (pool.c).  A side that closes otherwise sends none
 * and closes its sockets. */
struct rn_tcp_bye {
  struct rn_tcp_prefix p;
  uint32_t msg;      /* control messages this side sent before it (its number) */
  uint32_t received; /* control messages of the peer this side had read */
  uint32_t reserved; /* 0 */
  uint32_t crc;
};
/* A BYE defines no flag and carries no payload. */
static inline int rn_tcp_bye_shape_ok(const struct rn_tcp_bye *b) {
  return b->p.flags == 0 && b->p.plen == 0 && b->reserved == 0;
}

/* Sender -> receiver: a send cannot leave without a clear-to-send the
 * receiver may be holding back for a batch (PROTOCOL.md, CTS): send them
 * as soon as they are posted, until an eager message without CREDIT says
 * the sender is back to small messages with credit to spare. */
struct rn_tcp_want {
  struct rn_tcp_prefix p;
  uint32_t msg; /* control messages in this direction count from 0 (shared with DATA, DOWN) */
  uint32_t reserved;
  uint32_t crc;
};

/* Sender -> receiver: the comm's first message too large to go inline
 * needs data streams; the receiver answers with STREAMS.  A comm opens
 * them only then, so one that moves only small messages never does. */
struct rn_tcp_open {
  struct rn_tcp_prefix p;
  uint32_t msg; /* control messages in this direction count from 0 (shared with DATA, DOWN, WANT) */
  uint32_t reserved;
  uint32_t crc;
};

/* Receiver -> sender: dial the data streams as one connection, as at
 * connect: stream i to addr[i % nrails] (addr[nrails], when nonzero, is
 * the receiver's standby, a rail of its own as in a handle), with this
 * nonce; listeners of the receiver's own admit only it. */
#define RN_TCP_STREAMS_ADDRS 5
struct rn_tcp_streams {
  struct rn_tcp_prefix p;
  uint64_t nonce;
  uint32_t msg; /* control messages in this direction count from 0 (shared with CTS, ACK, OFFER) */
  uint32_t nrails; /* 1 .. RN_TCP_STREAMS_ADDRS */
  struct rn_wire_addr addr[RN_TCP_STREAMS_ADDRS];
  uint32_t crc;
};

/* The sizes are wire format; no compiler padding may hide in them. */
_Static_assert(sizeof(struct rn_tcp_prefix) == 8, "prefix is 8 bytes");
_Static_assert(sizeof(struct rn_tcp_cts) == 128, "CTS header is 128 bytes");
_Static_assert(sizeof(struct rn_tcp_data) == 56, "DATA header is 56 bytes");
_Static_assert(sizeof(struct rn_tcp_chunk) == 64, "CHUNK header is 64 bytes");
_Static_assert(sizeof(struct rn_tcp_ack) == 32, "ACK header is 32 bytes");
_Static_assert(sizeof(struct rn_tcp_down) == 24, "DOWN header is 24 bytes");
_Static_assert(sizeof(struct rn_tcp_offer) == 48, "OFFER header is 48 bytes");
_Static_assert(sizeof(struct rn_tcp_resume) == 32, "RESUME header is 32 bytes");
_Static_assert(sizeof(struct rn_tcp_bye) == 24, "BYE header is 24 bytes");
_Static_assert(sizeof(struct rn_tcp_want) == 20, "WANT header is 20 bytes");
_Static_assert(sizeof(struct rn_tcp_open) == 20, "OPEN header is 20 bytes");
_Static_assert(sizeof(struct rn_tcp_streams) == 128, "STREAMS header is 128 bytes");
_Static_assert(offsetof(struct rn_tcp_want, crc) == sizeof(struct rn_tcp_want) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_bye, crc) == sizeof(struct rn_tcp_bye) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_resume, crc) == sizeof(struct rn_tcp_resume) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_offer, crc) == sizeof(struct rn_tcp_offer) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_down, crc) == sizeof(struct rn_tcp_down) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_ack, crc) == sizeof(struct rn_tcp_ack) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_cts, crc) == sizeof(struct rn_tcp_cts) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_data, crc) == sizeof(struct rn_tcp_data) - 4, "crc last");
_Static_assert(offsetof(struct rn_tcp_chunk, crc) == sizeof(struct rn_tcp_chunk) - 4, "crc last");

/* CRC-32C (Castagnoli) of len bytes. */
uint32_t rn_tcp_wire_crc(const void *buf, size_t len);
/* Fill a header's prefix (hlen from the type) and its checksum. */
void rn_tcp_wire_seal(void *hdr, uint8_t type, uint8_t flags, uint32_t plen);
/* The header size of a type, 0 for an unknown type. */
size_t rn_tcp_wire_hlen(uint8_t type);
/* 1 when the checksum of an hlen-byte header matches. */
int rn_tcp_wire_crc_ok(const void *hdr, size_t hlen);

#endif
