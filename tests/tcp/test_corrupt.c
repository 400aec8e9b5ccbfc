/* Corruption harness for the TCP wire protocol (plugin/tcp/PROTOCOL.md).
 *
 * Each trial connects a send and a receive comm of the TCP transport,
 * both in this process, through an in-process proxy that forwards every
 * connection (control and data streams, both directions) and rewrites
 * one header of live traffic: the k-th message of one type, one field set
 * to a boundary value (0, 1, max, max-1, 2^(w-1), the real value +1 and
 * -1), one bit of a flags field toggled (a flag dropped or added), or
 * random bits flipped; or it passes half of one header and nothing more,
 * the connection left open (a peer hung in the middle of a message); or
 * it leaves one whole message out (header and payload), passes one
 * whole message twice, or passes it after the next message on its
 * connection (a peer that skips, repeats or reorders a message).  In "raw" trials the header checksum is
 * left as it was (corruption on the path); in "semantic" trials it is
 * recomputed, so the header is well formed and only the receiver's checks
 * against its own state stand between the value and the data (a peer that
 * writes wrong headers).  The two application-chosen fields, a CTS's tags
 * and an eager message's tag, are guarded by the checksum alone (a
 * consistent rewrite of them is indistinguishable from the application
 * choosing another tag), so their semantic trials keep the stale
 * checksum.
 *
 * The workload of every trial posts five receive groups (a grouped one
 * of three, one with a repeated tag, a zero-byte one) and sends eight
 * messages out of posting order, so eager (held and matched), inline,
 * streamed multi-chunk and zero-byte messages all occur; the last send is
 * streamed to the last group, so the sender has read every CTS and the
 * receiver every header and chunk before a trial can end "delivered".  The attacked
 * side (the receiver for DATA and CHUNK, the sender for CTS and ACK) must end each
 * trial with every byte and size verified, or with an error; after an
 * error on either side it must report one within the bound, and keep
 * reporting it on later calls.  Never a crash (the SAN build runs it under
 * ASan+UBSan, each receive buffer its own allocation), a hang (bounded by
 * RN_CORRUPT_BOUND_S x rn_timeout_scale(), default 5 s), or a receive
 * reported complete with wrong data.  Trials with no attack pass every
 * connection's bytes on in small pieces of random size: each must end
 * delivered.
 *
 * Trials run in forked batches, so a crash names its trial.  A summary of
 * outcomes by class goes out as TAP notes.
 *
 *   test_corrupt [--trials N] [--seed N] [--only K] [--verbose]
 *
 * --only K runs trial K of the list the seed and --trials give (the number
 * a failure names), alone.  RN_CORRUPT_DUMP=1 prints each rewritten
 * header, before and after, to stderr.
 */
#include "../common/rn_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "railnet/rendezvous.h"
#include "railnet/transport.h"
#include "../../plugin/tcp/wire.h"

/* ---- what a trial does ------------------------------------------------- */
enum trial_kind { T_FIELD, T_FLIP, T_BIT, T_STALL, T_DROP, T_DUP, T_SWAP, T_DRIBBLE };
enum trial_mode { M_RAW, M_SEMANTIC };
enum value_kind { V_ZERO, V_ONE, V_MAX, V_MAX1, V_HIGH, V_PLUS1, V_MINUS1, NVALUES };
static const char *const value_name[] = {"0", "1", "max", "max-1", "2^(w-1)", "+1", "-1"};

struct field {
  const char *name;
  uint8_t type;
  uint16_t off;
  uint8_t width; /* bytes */
  uint8_t app;   /* an application-chosen value: guarded by the checksum alone */
  uint8_t is_crc;
};

#define F(t, T, fld, w, app) \
  { #fld, RN_TCP_MSG_##T, (uint16_t)offsetof(struct rn_tcp_##t, fld), w, app, 0 }
#define FP(T, fld, w) \
  { #fld, RN_TCP_MSG_##T, (uint16_t)offsetof(struct rn_tcp_prefix, fld), w, 0, 0 }
static const struct field fields[] = {
    FP(CTS, type, 1),
    FP(CTS, flags, 1),
    FP(CTS, hlen, 2),
    FP(CTS, plen, 4),
    F(cts, CTS, seq, 8, 0),
    F(cts, CTS, sizes[0], 8, 0),
    F(cts, CTS, sizes[1], 8, 0),
    F(cts, CTS, sizes[2], 8, 0),
    F(cts, CTS, sizes[7], 8, 0),
    F(cts, CTS, msg, 4, 0),
    F(cts, CTS, n, 4, 0),
    F(cts, CTS, tags[0], 4, 1),
    F(cts, CTS, tags[1], 4, 1),
    F(cts, CTS, tags[7], 4, 0),
    F(cts, CTS, reserved, 4, 0),
    {"crc", RN_TCP_MSG_CTS, offsetof(struct rn_tcp_cts, crc), 4, 0, 1},
    FP(DATA, type, 1),
    FP(DATA, flags, 1),
    FP(DATA, hlen, 2),
    FP(DATA, plen, 4),
    F(data, DATA, seq, 8, 0),
    F(data, DATA, size, 8, 0),
    F(data, DATA, msg, 4, 0),
    F(data, DATA, tag, 4, 2 /* app only when EAGER */),
    F(data, DATA, idx, 4, 0),
    F(data, DATA, grid, 4, 0),
    F(data, DATA, nth, 4, 2 /* app only when EAGER */),
    F(data, DATA, claim, 4, 0),
    F(data, DATA, reserved, 4, 0),
    {"crc", RN_TCP_MSG_DATA, offsetof(struct rn_tcp_data, crc), 4, 0, 1},
    FP(CHUNK, type, 1),
    FP(CHUNK, flags, 1),
    FP(CHUNK, hlen, 2),
    FP(CHUNK, plen, 4),
    F(chunk, CHUNK, seq, 8, 0),
    F(chunk, CHUNK, total, 8, 0),
    F(chunk, CHUNK, offset, 8, 0),
    F(chunk, CHUNK, idx, 4, 0),
    F(chunk, CHUNK, index, 4, 0),
    F(chunk, CHUNK, grid, 4, 0),
    F(chunk, CHUNK, attempt, 4, 0),
    F(chunk, CHUNK, tag, 4, 0),
    F(chunk, CHUNK, nth, 4, 0),
    F(chunk, CHUNK, claim, 4, 0),
    {"crc", RN_TCP_MSG_CHUNK, offsetof(struct rn_tcp_chunk, crc), 4, 0, 1},
    FP(ACK, type, 1),
    FP(ACK, flags, 1),
    FP(ACK, hlen, 2),
    FP(ACK, plen, 4),
    F(ack, ACK, seq, 8, 0),
    F(ack, ACK, msg, 4, 0),
    F(ack, ACK, idx, 4, 0),
    F(ack, ACK, reserved, 4, 0),
    {"crc", RN_TCP_MSG_ACK, offsetof(struct rn_tcp_ack, crc), 4, 0, 1},
    /* The messages that open a comm's data streams (RAILNET_SOCKET_LAZY=1
     * trials; every other trial runs with the streams open from connect,
     * so its chunks pass the proxy). */
    FP(OPEN, type, 1),
    FP(OPEN, flags, 1),
    FP(OPEN, hlen, 2),
    FP(OPEN, plen, 4),
    F(open, OPEN, msg, 4, 0),
    F(open, OPEN, reserved, 4, 0),
    {"crc", RN_TCP_MSG_OPEN, offsetof(struct rn_tcp_open, crc), 4, 0, 1},
    FP(STREAMS, type, 1),
    FP(STREAMS, flags, 1),
    FP(STREAMS, hlen, 2),
    FP(STREAMS, plen, 4),
    F(streams, STREAMS, nonce, 8, 0),
    F(streams, STREAMS, msg, 4, 0),
    F(streams, STREAMS, nrails, 4, 0),
    F(streams, STREAMS, addr[0].family, 1, 0),
    F(streams, STREAMS, addr[0].port, 2, 0),
    F(streams, STREAMS, addr[1].family, 1, 0),
    {"crc", RN_TCP_MSG_STREAMS, offsetof(struct rn_tcp_streams, crc), 4, 0, 1},
};
/* Trials of these run with the data streams opened lazily. */
static int lazy_type(uint8_t t) { return t == RN_TCP_MSG_OPEN || t == RN_TCP_MSG_STREAMS; }
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

static const char *type_name(uint8_t t) {
  return t == RN_TCP_MSG_CTS       ? "CTS"
         : t == RN_TCP_MSG_DATA    ? "DATA"
         : t == RN_TCP_MSG_ACK     ? "ACK"
         : t == RN_TCP_MSG_OPEN    ? "OPEN"
         : t == RN_TCP_MSG_STREAMS ? "STREAMS"
                                   : "CHUNK";
}

/* Which occurrence of each type a trial rewrites: the workload below has
 * 5 CTS, 4 DATA (the streamed sends' chunks claim their buffers), 14 CHUNK
 * and (every streamed send acknowledged: RAILNET_RAIL_ACK=1) 4 ACK
 * messages. */
static const int occ_cts[] = {0, 1, 3, 4}, occ_data[] = {0, 1, 2, 3},
                 occ_chunk[] = {0, 2, 4, 5, 12}, occ_ack[] = {0, 1, 3}, occ_once[] = {0};

struct trial {
  enum trial_kind kind;
  enum trial_mode mode;
  uint8_t type;
  int occurrence;
  int field;             /* T_FIELD, and T_FLIP in semantic mode */
  enum value_kind value; /* T_FIELD */
  int bit;               /* T_BIT: the flags bit toggled; T_DRIBBLE: the largest piece */
  uint64_t flip_seed;    /* T_FLIP; T_DRIBBLE: the piece sizes' seed */
  int no_ack;            /* run with RAILNET_RAIL_ACK=0 (a one-rail comm's default) */
};

static struct trial *trials;
static int ntrials;

static const int *occurrences(uint8_t type, int *n) {
  if (type == RN_TCP_MSG_CTS) return *n = 4, occ_cts;
  if (type == RN_TCP_MSG_DATA) return *n = 4, occ_data;
  if (type == RN_TCP_MSG_ACK) return *n = 3, occ_ack;
  if (lazy_type(type)) return *n = 1, occ_once; /* one each per comm */
  return *n = 5, occ_chunk;
}

static void add_trial(struct trial t) {
  static int cap;
  if (ntrials == cap) {
    cap = cap ? cap * 2 : 1024;
    trials = realloc(trials, (size_t)cap * sizeof *trials);
    if (trials == NULL) abort();
  }
  trials[ntrials++] = t;
}

/* Every field x boundary value x occurrence, raw and semantic (the
 * checksum field raw only); every bit of every flags field toggled alone
 * (a flag dropped or added), likewise; then random bit flips, raw
 * anywhere in a header and semantic within one field. */
static void build_trials(uint64_t seed, int nflips_raw, int nflips_semantic) {
  for (int f = 0; f < NFIELDS; f++) {
    int nocc;
    const int *occ = occurrences(fields[f].type, &nocc);
    for (int o = 0; o < nocc; o++)
      for (int v = 0; v < NVALUES; v++)
        for (int m = 0; m < 2; m++) {
          if (m == M_SEMANTIC && fields[f].is_crc) continue;
          add_trial((struct trial){.kind = T_FIELD,
                                   .mode = (enum trial_mode)m,
                                   .type = fields[f].type,
                                   .occurrence = occ[o],
                                   .field = f,
                                   .value = (enum value_kind)v});
        }
  }
  for (int f = 0; f < NFIELDS; f++) {
    if (strcmp(fields[f].name, "flags") != 0) continue;
    int nocc;
    const int *occ = occurrences(fields[f].type, &nocc);
    for (int o = 0; o < nocc; o++)
      for (int b = 0; b < fields[f].width * 8; b++)
        for (int m = 0; m < 2; m++)
          add_trial((struct trial){.kind = T_BIT,
                                   .mode = (enum trial_mode)m,
                                   .type = fields[f].type,
                                   .occurrence = occ[o],
                                   .field = f,
                                   .bit = b});
  }
  /* Each message of the workload's types stopped half way through its
   * header, the connection left open (a peer hung mid-message). */
  for (int f = 0; f < NFIELDS; f++) {
    if (strcmp(fields[f].name, "type") != 0) continue;
    int nocc;
    const int *occ = occurrences(fields[f].type, &nocc);
    for (int o = 0; o < nocc; o++)
      add_trial((struct trial){.kind = T_STALL,
                               .mode = M_RAW,
                               .type = fields[f].type,
                               .occurrence = occ[o],
                               .field = -1});
  }
  /* Each of them left out whole, passed twice, and passed after the next
   * message (a peer that skips, repeats or reorders a message: the
   * checksum holds, only sequence and state checks can tell). */
  for (int f = 0; f < NFIELDS; f++) {
    if (strcmp(fields[f].name, "type") != 0) continue;
    int nocc;
    const int *occ = occurrences(fields[f].type, &nocc);
    for (int o = 0; o < nocc; o++)
      for (int k = T_DROP; k <= T_SWAP; k++)
        for (int a = 0; a < 2; a++) {
          /* without acknowledgements too, where the receiver alone must
           * notice (the sends it carries complete when they leave) */
          if (a == 1 && fields[f].type != RN_TCP_MSG_DATA && fields[f].type != RN_TCP_MSG_CHUNK)
            continue;
          add_trial((struct trial){.kind = (enum trial_kind)k,
                                   .mode = M_SEMANTIC,
                                   .type = fields[f].type,
                                   .occurrence = occ[o],
                                   .field = -1,
                                   .no_ack = a});
        }
  }
  /* No attack: every connection's bytes passed on in pieces of 1..max
   * bytes, so headers and payloads reach each reader cut at every offset
   * (a chunk's payload read together with part of the next header among
   * them).  These must all deliver. */
  static const int max_piece[] = {1, 2, 5, 13, 55, 57};
  for (int m = 0; m < (int)(sizeof max_piece / sizeof max_piece[0]); m++)
    for (int k = 0; k < 2; k++)
      add_trial((struct trial){.kind = T_DRIBBLE,
                               .mode = M_RAW,
                               .type = RN_TCP_MSG_CHUNK,
                               .field = -1,
                               .bit = max_piece[m],
                               .flip_seed = seed * 31 + (uint64_t)(2 * m + k) + 1});
  uint64_t s = seed;
  for (int i = 0; i < nflips_raw + nflips_semantic; i++) {
    uint8_t type = (uint8_t)(1 + rng_next(&s) % 4);
    int nocc;
    const int *occ = occurrences(type, &nocc);
    int f = -1;
    enum trial_mode mode = i < nflips_raw ? M_RAW : M_SEMANTIC;
    if (mode == M_SEMANTIC) {
      do {
        f = (int)(rng_next(&s) % NFIELDS);
      } while (fields[f].type != type || fields[f].is_crc || fields[f].app == 1);
    }
    add_trial((struct trial){.kind = T_FLIP,
                             .mode = mode,
                             .type = type,
                             .occurrence = occ[rng_next(&s) % (uint64_t)nocc],
                             .field = f,
                             .flip_seed = rng_next(&s)});
  }
}

static void describe(const struct trial *t, char *buf, size_t len) {
  if (t->kind == T_FIELD)
    snprintf(buf, len, "%s #%d field %s := %s, %s", type_name(t->type), t->occurrence,
             fields[t->field].name, value_name[t->value],
             t->mode == M_RAW ? "raw (stale checksum)" : "semantic (checksum recomputed)");
  else if (t->kind == T_STALL)
    snprintf(buf, len, "%s #%d: the peer stops half way through its header", type_name(t->type),
             t->occurrence);
  else if (t->kind == T_DROP || t->kind == T_DUP || t->kind == T_SWAP)
    snprintf(buf, len, "%s #%d: the whole message %s%s", type_name(t->type), t->occurrence,
             t->kind == T_DROP  ? "left out"
             : t->kind == T_DUP ? "passed twice"
                                : "passed after the next one",
             t->no_ack ? ", sends not acknowledged" : "");
  else if (t->kind == T_DRIBBLE)
    snprintf(buf, len, "no attack: every byte passed in pieces of 1..%d bytes (seed %llu)", t->bit,
             (unsigned long long)t->flip_seed);
  else if (t->kind == T_BIT)
    snprintf(buf, len, "%s #%d field %s bit %d toggled, %s", type_name(t->type), t->occurrence,
             fields[t->field].name, t->bit,
             t->mode == M_RAW ? "raw (stale checksum)" : "semantic (checksum recomputed)");
  else
    snprintf(buf, len, "%s #%d random bits flipped%s%s (seed %llu), %s", type_name(t->type),
             t->occurrence, t->field >= 0 ? " in " : "", t->field >= 0 ? fields[t->field].name : "",
             (unsigned long long)t->flip_seed,
             t->mode == M_RAW ? "raw (stale checksum)" : "semantic (checksum recomputed)");
}

/* ---- the mutation, applied by the proxy -------------------------------- */
static uint64_t get_le(const uint8_t *p, int w) {
  uint64_t v = 0;
  memcpy(&v, p, (size_t)w); /* host order, like the wire */
  return v;
}

static void put_le(uint8_t *p, int w, uint64_t v) { memcpy(p, &v, (size_t)w); }

struct mutation_result {
  int applied;   /* the target occurred */
  int unchanged; /* the new bytes equal the old ones */
  int crc_only;  /* an application field: checksum left stale on purpose */
};

static void mutate(const struct trial *t, uint8_t *hdr, size_t hlen, struct mutation_result *res) {
  uint8_t before[128];
  memcpy(before, hdr, hlen);
  int recompute = t->mode == M_SEMANTIC;
  if (t->kind == T_FIELD) {
    const struct field *f = &fields[t->field];
    int bits = f->width * 8;
    uint64_t max = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
    uint64_t v = get_le(hdr + f->off, f->width), nv = 0;
    switch (t->value) {
      case V_ZERO:
        nv = 0;
        break;
      case V_ONE:
        nv = 1;
        break;
      case V_MAX:
        nv = max;
        break;
      case V_MAX1:
        nv = max - 1;
        break;
      case V_HIGH:
        nv = 1ull << (bits - 1);
        break;
      case V_PLUS1:
        nv = (v + 1) & max;
        break;
      case V_MINUS1:
        nv = (v - 1) & max;
        break;
      default:
        break;
    }
    put_le(hdr + f->off, f->width, nv);
  } else if (t->kind == T_BIT) {
    hdr[fields[t->field].off + t->bit / 8] ^= (uint8_t)(1u << (t->bit % 8));
  } else {
    uint64_t s = t->flip_seed;
    int nbits = 1 + (int)(rng_next(&s) % 3);
    for (int b = 0; b < nbits; b++) {
      size_t lo = 0, span = hlen * 8;
      if (t->field >= 0) lo = fields[t->field].off * 8u, span = fields[t->field].width * 8u;
      size_t bit = lo + rng_next(&s) % span;
      hdr[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
  }
  /* An application-chosen field keeps the stale checksum: it is what
   * guards it (the tag of an eager message is application data). */
  if (t->field >= 0) {
    const struct field *f = &fields[t->field];
    int eager = t->type == RN_TCP_MSG_DATA && (before[1] & RN_TCP_DATA_EAGER);
    if (recompute && (f->app == 1 || (f->app == 2 && eager))) {
      recompute = 0;
      res->crc_only = 1;
    }
  }
  if (recompute) {
    uint32_t crc = rn_tcp_wire_crc(hdr, hlen - 4);
    memcpy(hdr + hlen - 4, &crc, 4);
  }
  res->applied = 1;
  res->unchanged = memcmp(before, hdr, hlen) == 0;
  if (getenv("RN_CORRUPT_DUMP")) {
    fprintf(stderr, "DUMP before:");
    for (size_t i = 0; i < hlen; i++) fprintf(stderr, " %02x", before[i]);
    fprintf(stderr, "\nDUMP after: ");
    for (size_t i = 0; i < hlen; i++) fprintf(stderr, " %02x", hdr[i]);
    fprintf(stderr, "\n");
  }
}

/* ---- the proxy ---------------------------------------------------------- */
#define PBUF 65536
#define MAX_PCONN 8

/* One direction of one proxied connection: bytes read from src are framed
 * (preamble, then header + payload messages) and written to dst. */
struct pdir {
  int src, dst;
  int eof;            /* src ended: dst gets SHUT_WR once out drains */
  size_t pre;         /* preamble bytes still to pass through */
  int preamble_known; /* set once the connection's role is known */
  int raw;            /* no framing on this direction */
  int stalled;        /* T_STALL: nothing more passes (the peer hangs mid-message) */
  uint8_t hdr[128];
  size_t hgot;
  uint64_t pay;  /* payload bytes still to pass */
  uint64_t skip; /* T_DROP: payload bytes still to leave out */
  /* T_DUP, T_SWAP: a copy of the target message, taken as it passes */
  uint8_t *dup;
  size_t dup_len, dup_got;
  int dup_armed; /* taking the copy */
  int withhold;  /* T_SWAP: the target itself does not pass */
  int held;      /* T_SWAP: the copy passes once the next message has */
  uint8_t out[4 * PBUF];
  size_t olen;
  uint8_t hello[sizeof(struct rn_hello)];
  size_t hello_got;
};

struct pconn {
  int used;
  int a, b;         /* a: the connecting (sending) side, b: to the listener */
  int role;         /* from the hello; 0 until known */
  struct pdir d[2]; /* d[0]: a -> b (sender to receiver), d[1]: b -> a */
};

struct proxy {
  int lfd;
  union {
    struct sockaddr_in in;
  } up; /* the real listener */
  struct pconn c[MAX_PCONN];
  const struct trial *t;
  int seen[256]; /* headers of each type forwarded so far, by type */
  struct mutation_result res;
  int broken;
  uint64_t piece_rng; /* T_DRIBBLE */
};

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void pdir_emit(struct pdir *d, const void *b, size_t n) {
  if (d->olen + n > sizeof d->out) abort(); /* flow control keeps this from happening */
  memcpy(d->out + d->olen, b, n);
  d->olen += n;
}

/* The copy of the target passes. */
static void pdir_dup_emit(struct pdir *d) {
  pdir_emit(d, d->dup, d->dup_len);
  free(d->dup);
  d->dup = NULL;
  d->dup_armed = d->held = 0;
}

/* A whole message (header and payload) went by. */
static void pdir_msg_end(struct pdir *d) {
  if (d->held) { /* the one after the target: now the target */
    pdir_dup_emit(d);
  } else if (d->dup_armed) { /* the target: again now, or after the next */
    d->dup_armed = 0;
    if (d->withhold)
      d->withhold = 0, d->held = 1;
    else
      pdir_dup_emit(d);
  }
}

/* Feed bytes from src through the framer into out. */
static void pdir_feed(struct proxy *px, struct pconn *pc, int dir, const uint8_t *b, size_t n) {
  struct pdir *d = &pc->d[dir];
  if (d->stalled) return;
  while (n > 0) {
    if (d->pre > 0) {
      size_t take = n < d->pre ? n : d->pre;
      if (dir == 0 && d->hello_got < sizeof d->hello) {
        size_t h = take < sizeof d->hello - d->hello_got ? take : sizeof d->hello - d->hello_got;
        memcpy(d->hello + d->hello_got, b, h);
        d->hello_got += h;
        if (d->hello_got == sizeof d->hello) {
          struct rn_hello hh;
          memcpy(&hh, d->hello, sizeof hh);
          pc->role = hh.role;
          /* receiver -> sender: the accept byte then CTSs on the control
           * connection; nothing at all on a data stream */
          pc->d[1].pre = pc->role == RN_ROLE_CTRL ? 1 : 0;
          pc->d[1].raw = pc->role != RN_ROLE_CTRL;
          pc->d[1].preamble_known = 1;
        }
      }
      pdir_emit(d, b, take);
      d->pre -= take, b += take, n -= take;
    } else if (d->raw) {
      pdir_emit(d, b, n);
      n = 0;
    } else if (d->skip > 0) {
      size_t take = n < d->skip ? n : (size_t)d->skip;
      d->skip -= take, b += take, n -= take;
    } else if (d->pay > 0) {
      size_t take = n < d->pay ? n : (size_t)d->pay;
      if (!d->withhold) pdir_emit(d, b, take);
      if (d->dup_armed) {
        memcpy(d->dup + d->dup_got, b, take);
        d->dup_got += take;
      }
      d->pay -= take, b += take, n -= take;
      if (d->pay == 0) pdir_msg_end(d);
    } else {
      size_t need = sizeof(struct rn_tcp_prefix);
      if (d->hgot >= need) {
        struct rn_tcp_prefix p;
        memcpy(&p, d->hdr, sizeof p);
        need = p.hlen;
      }
      size_t take = need - d->hgot < n ? need - d->hgot : n;
      memcpy(d->hdr + d->hgot, b, take);
      d->hgot += take, b += take, n -= take;
      if (d->hgot == sizeof(struct rn_tcp_prefix)) {
        struct rn_tcp_prefix p;
        memcpy(&p, d->hdr, sizeof p);
        if (p.hlen != rn_tcp_wire_hlen(p.type)) { /* not our framing: pass the rest raw */
          pdir_emit(d, d->hdr, d->hgot);
          d->hgot = 0;
          d->raw = 1;
        }
        continue;
      }
      struct rn_tcp_prefix p;
      memcpy(&p, d->hdr, sizeof p);
      if (d->hgot < sizeof p || d->hgot < p.hlen) continue;
      /* A whole header: the trial's target? */
      if (p.type == px->t->type && px->seen[p.type]++ == px->t->occurrence &&
          px->t->kind != T_DRIBBLE) {
        if (px->t->kind == T_STALL) {
          /* Half the header, then nothing, the connection left open. */
          pdir_emit(d, d->hdr, p.hlen / 2);
          px->res.applied = 1;
          d->stalled = 1;
          return;
        }
        if (px->t->kind == T_DROP) {
          px->res.applied = 1;
          d->skip = p.plen;
          d->hgot = 0;
          continue;
        }
        if (px->t->kind == T_DUP || px->t->kind == T_SWAP) {
          px->res.applied = 1;
          d->withhold = px->t->kind == T_SWAP;
          d->dup_len = p.hlen + (size_t)p.plen;
          d->dup = malloc(d->dup_len);
          if (d->dup == NULL || d->dup_len > PBUF) abort(); /* the workload's are small */
          memcpy(d->dup, d->hdr, p.hlen);
          d->dup_got = p.hlen;
          d->dup_armed = 1;
        } else {
          mutate(px->t, d->hdr, p.hlen, &px->res);
        }
      }
      if (!d->withhold) pdir_emit(d, d->hdr, p.hlen);
      d->pay = p.plen; /* the original framing continues */
      d->hgot = 0;
      if (p.plen == 0) pdir_msg_end(d);
    }
  }
}

static void pconn_close(struct pconn *pc) {
  if (!pc->used) return;
  free(pc->d[0].dup);
  free(pc->d[1].dup);
  close(pc->a);
  close(pc->b);
  pc->used = 0;
}

static void proxy_pump(struct proxy *px) {
  for (;;) {
    int fd = accept(px->lfd, NULL, NULL);
    if (fd < 0) break;
    int slot = -1;
    for (int i = 0; i < MAX_PCONN; i++)
      if (!px->c[i].used) slot = i;
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (slot < 0 || up < 0 || connect(up, (struct sockaddr *)&px->up.in, sizeof px->up.in) != 0) {
      close(fd);
      if (up >= 0) close(up);
      px->broken = 1;
      continue;
    }
    set_nonblock(fd);
    set_nonblock(up);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct pconn *pc = &px->c[slot];
    memset(pc, 0, sizeof *pc);
    pc->used = 1;
    pc->a = fd;
    pc->b = up;
    pc->d[0].src = fd, pc->d[0].dst = up, pc->d[0].pre = sizeof(struct rn_hello);
    pc->d[1].src = up, pc->d[1].dst = fd;
  }
  for (int i = 0; i < MAX_PCONN; i++) {
    struct pconn *pc = &px->c[i];
    if (!pc->used) continue;
    for (int dir = 0; dir < 2; dir++) {
      struct pdir *d = &pc->d[dir];
      if (d->olen > 0) {
        size_t n = d->olen;
        if (px->t->kind == T_DRIBBLE) {
          size_t piece = 1 + (size_t)(rng_next(&px->piece_rng) % (uint64_t)px->t->bit);
          if (n > piece) n = piece;
          px->res.applied = 1;
        }
        ssize_t w = send(d->dst, d->out, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
          memmove(d->out, d->out + w, d->olen - (size_t)w);
          d->olen -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          /* the far side is gone: end both directions */
          shutdown(pc->a, SHUT_RDWR);
          shutdown(pc->b, SHUT_RDWR);
          d->olen = 0;
          d->eof = 1;
        }
      }
      /* the b -> a direction frames only once the role is known */
      if (dir == 1 && !d->preamble_known && !d->raw) continue;
      if (!d->eof && d->olen < PBUF / 2) {
        uint8_t tmp[PBUF / 4];
        ssize_t r = recv(d->src, tmp, sizeof tmp, MSG_DONTWAIT);
        if (r > 0) {
          pdir_feed(px, pc, dir, tmp, (size_t)r);
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          d->eof = 1;
          if (r < 0) shutdown(d->dst, SHUT_RDWR); /* a reset: pass it on */
        }
      }
      if (d->eof && d->olen == 0) shutdown(d->dst, SHUT_WR);
    }
  }
}

static int proxy_open(struct proxy *px, const struct rn_handle *h) {
  memset(px, 0, sizeof *px);
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h->payload;
  if (w[0].family != 4) return -1;
  px->up.in.sin_family = AF_INET;
  px->up.in.sin_port = w[0].port;
  memcpy(&px->up.in.sin_addr, w[0].addr, 4);
  px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (px->lfd < 0 || bind(px->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(px->lfd, 64) != 0 || getsockname(px->lfd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  px->up.in.sin_port = w[0].port;
  return ntohs(a.sin_port);
}

static void proxy_reset(struct proxy *px, const struct trial *t) {
  for (int i = 0; i < MAX_PCONN; i++) pconn_close(&px->c[i]);
  memset(px->seen, 0, sizeof px->seen);
  memset(&px->res, 0, sizeof px->res);
  px->t = t;
  px->broken = 0;
  px->piece_rng = t->flip_seed;
}

/* The handle the sender connects with: every address the proxy's. */
static void handle_via_proxy(const struct rn_handle *h, int port, struct rn_handle *out) {
  *out = *h;
  struct rn_wire_addr *w = (struct rn_wire_addr *)out->payload;
  for (int i = 0; i < out->nrails; i++) {
    w[i].family = 4;
    w[i].port = htons((uint16_t)port);
    uint32_t lo = htonl(INADDR_LOOPBACK);
    memset(w[i].addr, 0, sizeof w[i].addr);
    memcpy(w[i].addr, &lo, 4);
  }
  /* the handle's FNV-1a checksum, as the core computes it */
  const uint8_t *b = (const uint8_t *)out;
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < offsetof(struct rn_handle, check); i++) x = (x ^ b[i]) * 16777619u;
  out->check = x;
}

/* ---- the workload --------------------------------------------------------- */
struct rgroup {
  int n;
  int tags[3];
  size_t posted[3];
};
static const struct rgroup groups[] = {
    {1, {8}, {20000}},                 /* streamed, 5 chunks */
    {3, {0, 1, 2}, {128, 3000, 9000}}, /* eager (held), streamed 1 chunk, streamed 3 chunks */
    {2, {3, 3}, {50, 64}},             /* a repeated tag */
    {1, {4}, {0}},                     /* zero bytes */
    {1, {5}, {32768}},                 /* last: its send must read every CTS before */
};
#define NGROUPS 5
struct smsg {
  int tag;
  size_t size;
  int group, idx; /* where the rule puts it */
};
/* Out of posting order: tag 0 before its group is posted, tag 8's group
 * first, the repeated tag split by another send. */
static const struct smsg sends[] = {
    {0, 100, 1, 0},  {8, 20000, 0, 0}, {1, 3000, 1, 1}, {3, 50, 2, 0},
    {2, 9000, 1, 2}, {3, 40, 2, 1},    {4, 0, 3, 0},    {5, 20000, 4, 0},
};
#define NSENDS 8

struct side {
  void *comm;
  ncclResult_t err; /* first error */
  int sticky_checked;
};

struct run {
  struct rn_peer *p;
  struct side tx, rx;
  void *mh_tx, *mh_rx;
  unsigned char *sbuf[NSENDS];
  unsigned char *rbuf[NGROUPS][3];
  void *sreq[NSENDS];
  int sdone[NSENDS], next_send;
  void *rreq[NGROUPS];
  int rdone[NGROUPS], posted;
  void *probe_req;
  uint64_t trial;
  int corrupt;
  char why[256];
};

static uint64_t key_of(uint64_t trial, int msg) { return pattern_key(trial, (uint64_t)msg, 0); }

static void note_err(struct side *s, ncclResult_t r) {
  if (r != ncclSuccess && s->err == ncclSuccess) s->err = r;
}

static void tx_step(struct run *x) {
  struct rn_peer *p = x->p;
  if (x->tx.err != ncclSuccess) return;
  if (x->next_send < NSENDS) {
    const struct smsg *m = &sends[x->next_send];
    void *req = NULL;
    ncclResult_t r =
        rn_net_isend(&p->net, x->tx.comm, x->sbuf[x->next_send], m->size, m->tag, x->mh_tx, &req);
    note_err(&x->tx, r);
    if (r == ncclSuccess && req != NULL) x->sreq[x->next_send++] = req;
  }
  for (int i = 0; i < x->next_send && x->tx.err == ncclSuccess; i++) {
    if (x->sdone[i]) continue;
    int done = 0;
    note_err(&x->tx, rn_net_test(&p->net, x->sreq[i], &done, NULL));
    if (x->tx.err == ncclSuccess && done) x->sdone[i] = 1;
  }
}

static void rx_step(struct run *x) {
  struct rn_peer *p = x->p;
  const uint64_t trial = x->trial;
  if (x->rx.err != ncclSuccess) return;
  if (x->posted < NGROUPS) {
    const struct rgroup *g = &groups[x->posted];
    void *data[3], *mhs[3] = {x->mh_rx, x->mh_rx, x->mh_rx};
    for (int i = 0; i < g->n; i++) data[i] = x->rbuf[x->posted][i];
    void *req = NULL;
    ncclResult_t r = rn_net_irecv(&p->net, x->rx.comm, g->n, data, g->posted, g->tags, mhs, &req);
    note_err(&x->rx, r);
    if (r == ncclSuccess && req != NULL) x->rreq[x->posted++] = req;
  }
  for (int gi = 0; gi < x->posted && x->rx.err == ncclSuccess; gi++) {
    if (x->rdone[gi]) continue;
    int done = 0, sizes[3] = {-1, -1, -1};
    note_err(&x->rx, rn_net_test(&p->net, x->rreq[gi], &done, sizes));
    if (x->rx.err != ncclSuccess || !done) continue;
    x->rdone[gi] = 1;
    /* Reported complete: every size and byte must be the sent ones. */
    for (int k = 0; k < NSENDS; k++) {
      const struct smsg *m = &sends[k];
      if (m->group != gi) continue;
      size_t bad = (size_t)sizes[m->idx] != m->size
                       ? 0
                       : pattern_check(x->rbuf[gi][m->idx], m->size, key_of(trial, k));
      if ((size_t)sizes[m->idx] != m->size || bad != (size_t)-1) {
        x->corrupt = 1;
        snprintf(x->why, sizeof x->why,
                 "group %d buffer %d reported complete with %d bytes (sent %zu)%s", gi, m->idx,
                 sizes[m->idx], m->size, bad != (size_t)-1 ? " and wrong bytes" : "");
      }
    }
  }
}

static int tx_finished(const struct run *x) {
  if (x->next_send < NSENDS) return 0;
  for (int i = 0; i < NSENDS; i++)
    if (!x->sdone[i]) return 0;
  return 1;
}

static int rx_finished(const struct run *x) {
  if (x->posted < NGROUPS) return 0;
  for (int i = 0; i < NGROUPS; i++)
    if (!x->rdone[i]) return 0;
  return 1;
}

/* After an error elsewhere, make the attacked side take a step so it can
 * see it: test what it has in flight, else post one more request. */
static void probe(struct run *x, int attacked_tx) {
  struct rn_peer *p = x->p;
  struct side *s = attacked_tx ? &x->tx : &x->rx;
  if (s->err != ncclSuccess) return;
  if (attacked_tx) {
    if (!tx_finished(x)) return tx_step(x);
    if (x->probe_req == NULL) {
      static unsigned char one = 1;
      note_err(s, rn_net_isend(&p->net, s->comm, &one, 1, 99, x->mh_tx, &x->probe_req));
      return;
    }
  } else {
    if (!rx_finished(x)) return rx_step(x);
    if (x->probe_req == NULL) {
      static unsigned char sink[8];
      void *d = sink;
      size_t sz = sizeof sink;
      int tag = 99;
      note_err(s, rn_net_irecv(&p->net, s->comm, 1, &d, &sz, &tag, &x->mh_rx, &x->probe_req));
      return;
    }
  }
  int done = 0, sz = 0;
  note_err(s, rn_net_test(&p->net, x->probe_req, &done, &sz));
  if (done) x->probe_req = NULL;
}

/* ---- outcomes ------------------------------------------------------------ */
enum outcome {
  O_DETECTED,    /* the attacked side failed with an error */
  O_DELIVERED,   /* every byte and size verified: the rewrite was harmless */
  O_UNCHANGED,   /* the rewrite wrote the value that was there */
  O_NOT_REACHED, /* the workload never sent that message */
  O_FAIL_HANG,
  O_FAIL_HONEST, /* no attack (T_DRIBBLE), yet a side failed */
  O_FAIL_CORRUPT,
  O_FAIL_NOT_STICKY,
  O_FAIL_SILENT, /* the peer failed, the attacked side never reported it */
  O_FAIL_CLOSE,
  O_FAIL_SETUP,
  O_FAIL_CRASH,
  NOUTCOMES
};
static const char *const outcome_name[] = {
    "detected (error on the attacked side)",
    "delivered and verified (harmless rewrite)",
    "no-op (value unchanged)",
    "target not reached",
    "FAIL: hang",
    "FAIL: an honest peer's bytes in pieces failed",
    "FAIL: wrong data reported as success",
    "FAIL: error not sticky",
    "FAIL: attacked side never saw the error",
    "FAIL: close failed",
    "FAIL: set-up failed",
    "FAIL: crashed",
};

struct record {
  int32_t trial;
  int32_t outcome; /* -1: trial starting */
  char cause[96];  /* the first protocol WARN's check, for the summary */
  char detail[200];
};

/* The check that fired: "<message>: <field>" from the first protocol
 * violation WARN, or another WARN's gist. */
static void cause_of(char *buf, size_t len) {
  char w[512];
  if (rn_log_first_warn("protocol violation", w, sizeof w)) {
    const char *in = strstr(w, " in ");
    if (in != NULL) {
      in += 4;
      const char *colon = strchr(in, ':');
      const char *sp = colon ? strchr(colon + 2, ' ') : NULL;
      if (colon && sp) {
        snprintf(buf, len, "%.*s: %.*s", (int)(colon - in), in, (int)(sp - colon - 2), colon + 2);
        return;
      }
    }
    snprintf(buf, len, "protocol violation");
  } else if (rn_log_first_warn("exceeds the posted receive", w, sizeof w) ||
             rn_log_first_warn("holds only", w, sizeof w)) {
    snprintf(buf, len, "message larger than its buffer");
  } else if (rn_log_first_warn(NULL, w, sizeof w)) {
    /* "<side> comm to <peer> failed (error N): <why>": the why, its
     * numbers as N, so that one cause counts once */
    const char *why = strstr(w, " failed (error ");
    why = why != NULL ? strstr(why, "): ") : NULL;
    if (why != NULL) {
      size_t o = (size_t)snprintf(buf, len, "%s failed: ",
                                  strstr(w, "receive comm") != NULL ? "receiver" : "sender");
      for (const char *q = why + 3; *q != '\0' && o + 1 < len && o < 64; q++) {
        if (*q >= '0' && *q <= '9') {
          while (q[1] >= '0' && q[1] <= '9') q++;
          buf[o++] = 'N';
        } else {
          buf[o++] = *q;
        }
      }
      buf[o < len ? o : len - 1] = '\0';
    } else {
      snprintf(buf, len, "other: %.60s", w);
    }
  } else {
    snprintf(buf, len, "none");
  }
}

static double g_bound_s = 5;
static int g_verbose;

static int run_trial(struct rn_peer *p, void *lcomm, const struct rn_handle *via, struct proxy *px,
                     int index, struct record *rec) {
  const struct trial *t = &trials[index];
  struct run x;
  memset(&x, 0, sizeof x);
  x.p = p;
  x.trial = (uint64_t)index;
  x.rx.err = x.tx.err = ncclSuccess;
  proxy_reset(px, t);
  rn_log_reset();
  const int attacked_tx =
      t->type == RN_TCP_MSG_CTS || t->type == RN_TCP_MSG_ACK || t->type == RN_TCP_MSG_STREAMS;
  const double bound = g_bound_s * rn_timeout_scale();
  rec->outcome = O_FAIL_SETUP;
  rec->cause[0] = '\0';
  /* connect through the proxy, accept on the real listener */
  double end = now_s() + bound;
  while (x.tx.comm == NULL || x.rx.comm == NULL) {
    proxy_pump(px);
    ncclResult_t r;
    if (x.tx.comm == NULL &&
        (r = rn_net_connect(&p->net, p->dev, (void *)via, &x.tx.comm)) != ncclSuccess)
      return snprintf(rec->detail, sizeof rec->detail, "connect: %s", rn_result_str(r)), 0;
    if (x.rx.comm == NULL && (r = rn_net_accept(&p->net, lcomm, &x.rx.comm)) != ncclSuccess)
      return snprintf(rec->detail, sizeof rec->detail, "accept: %s", rn_result_str(r)), 0;
    if (now_s() > end)
      return snprintf(rec->detail, sizeof rec->detail, "connect/accept not up in %.0f s", bound), 0;
  }
  static unsigned char sendarea[NSENDS][20000];
  for (int k = 0; k < NSENDS; k++) {
    x.sbuf[k] = sendarea[k];
    pattern_fill(x.sbuf[k], sends[k].size, key_of((uint64_t)index, k));
  }
  /* each receive buffer its own allocation of exactly the posted size, so
   * ASan sees any byte written outside it */
  for (int g = 0; g < NGROUPS; g++)
    for (int i = 0; i < groups[g].n; i++)
      x.rbuf[g][i] = malloc(groups[g].posted[i] ? groups[g].posted[i] : 1);
  ncclResult_t r1 =
      rn_net_regmr(&p->net, x.tx.comm, sendarea, sizeof sendarea, NCCL_PTR_HOST, &x.mh_tx);
  ncclResult_t r2 =
      rn_net_regmr(&p->net, x.rx.comm, x.rbuf[0][0], groups[0].posted[0], NCCL_PTR_HOST, &x.mh_rx);
  int ok_setup = r1 == ncclSuccess && r2 == ncclSuccess;
  end = now_s() + bound;
  while (ok_setup) {
    tx_step(&x);
    proxy_pump(px);
    rx_step(&x);
    proxy_pump(px);
    int tx_over = x.tx.err != ncclSuccess || tx_finished(&x);
    int rx_over = x.rx.err != ncclSuccess || rx_finished(&x) || x.corrupt;
    if ((tx_over && rx_over) || now_s() > end) break;
  }
  /* An error anywhere must reach the attacked side within the bound. */
  int any_err = x.tx.err != ncclSuccess || x.rx.err != ncclSuccess;
  struct side *att = attacked_tx ? &x.tx : &x.rx;
  while (ok_setup && any_err && att->err == ncclSuccess && now_s() < end) {
    proxy_pump(px);
    probe(&x, attacked_tx);
  }
  /* A failed comm keeps failing: a later isend/irecv returns the error,
   * or a request whose test() does (never a retry, never a success).  (A
   * send or receive too big for its buffer fails just that request: a
   * usage error, the comm stays up.) */
  int sticky = 1;
  if (att->err != ncclSuccess && att->err != ncclInvalidUsage) {
    ncclResult_t r;
    void *req = NULL;
    if (attacked_tx) {
      static unsigned char one;
      r = rn_net_isend(&p->net, att->comm, &one, 1, 5, x.mh_tx, &req);
    } else {
      void *d = x.rbuf[0][0];
      size_t sz = 1;
      int tag = 5;
      r = rn_net_irecv(&p->net, att->comm, 1, &d, &sz, &tag, &x.mh_rx, &req);
    }
    if (r == ncclSuccess && req != NULL) {
      int done = 0, got = 0;
      r = rn_net_test(&p->net, req, &done, &got);
      if (done) r = ncclSuccess;
    }
    sticky = r != ncclSuccess;
  }
  cause_of(rec->cause, sizeof rec->cause);
  if (!ok_setup)
    snprintf(rec->detail, sizeof rec->detail, "regMr: %s / %s", rn_result_str(r1),
             rn_result_str(r2));
  else if (x.corrupt)
    rec->outcome = O_FAIL_CORRUPT, snprintf(rec->detail, sizeof rec->detail, "%.190s", x.why);
  else if (att->err != ncclSuccess)
    rec->outcome = sticky ? O_DETECTED : O_FAIL_NOT_STICKY;
  else if (any_err)
    rec->outcome = O_FAIL_SILENT;
  else if (tx_finished(&x) && rx_finished(&x))
    rec->outcome = !px->res.applied ? O_NOT_REACHED : px->res.unchanged ? O_UNCHANGED : O_DELIVERED;
  else
    rec->outcome = O_FAIL_HANG,
    snprintf(rec->detail, sizeof rec->detail,
             "after %.1f s: %d of %d sends done, %d of %d groups posted, target %s", bound,
             x.next_send, NSENDS, x.posted, NGROUPS, px->res.applied ? "rewritten" : "not seen");
  if (t->kind == T_DRIBBLE && rec->outcome < O_FAIL_HANG && rec->outcome != O_DELIVERED)
    rec->outcome = O_FAIL_HONEST, snprintf(rec->detail, sizeof rec->detail, "sender %s, receiver %s",
                                           rn_result_str(x.tx.err), rn_result_str(x.rx.err));
  if (rec->outcome == O_DELIVERED && px->res.crc_only)
    rec->outcome = O_FAIL_CORRUPT,
    snprintf(rec->detail, sizeof rec->detail, "a stale checksum went unnoticed");
  if (rec->outcome == O_FAIL_SILENT || rec->outcome == O_FAIL_NOT_STICKY)
    snprintf(rec->detail, sizeof rec->detail, "sender %s, receiver %s; first WARN: %s",
             rn_result_str(x.tx.err), rn_result_str(x.rx.err), rn_log_last_warn());
  /* closes never wait for the peer, whatever state it is in */
  ncclResult_t c1 = x.tx.comm ? rn_net_close_send(&p->net, x.tx.comm) : ncclSuccess;
  ncclResult_t c2 = x.rx.comm ? rn_net_close_recv(&p->net, x.rx.comm) : ncclSuccess;
  if ((c1 != ncclSuccess || c2 != ncclSuccess) && rec->outcome < O_FAIL_HANG)
    rec->outcome = O_FAIL_CLOSE, snprintf(rec->detail, sizeof rec->detail, "close: %s / %s",
                                          rn_result_str(c1), rn_result_str(c2));
  for (int g = 0; g < NGROUPS; g++)
    for (int i = 0; i < groups[g].n; i++) free(x.rbuf[g][i]);
  proxy_reset(px, t);
  if (g_verbose) {
    char d[200];
    describe(t, d, sizeof d);
    diag("trial %d: %s -> %s (%s) %s", index, d, outcome_name[rec->outcome], rec->cause,
         rec->detail);
  }
  return 0;
}

/* A child runs trials [first, last) and reports each on the pipe. */
static void run_batch(int first, int last, int fd) {
  struct rn_peer p;
  memset(&p, 0, sizeof p);
  char err[256];
  setenv("RAILNET_SOCKET_LAZY", lazy_type(trials[first].type) ? "1" : "0", 1);
  /* streamed sends acknowledged, as on multi-rail comms, unless the trial
   * says otherwise */
  setenv("RAILNET_RAIL_ACK", trials[first].no_ack ? "0" : "1", 1);
  if (rn_net_open(&p.net, 8, err, sizeof err) != 0 || rn_net_init(&p.net) != ncclSuccess ||
      rn_net_devices(&p.net, &p.ndev) != ncclSuccess || p.ndev < 1) {
    diag("plugin not usable: %s", err);
    _exit(3);
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  if (rn_net_listen(&p.net, 0, handle, &lcomm) != ncclSuccess) _exit(3);
  static struct proxy px;
  struct rn_handle h, via;
  memcpy(&h, handle, sizeof h);
  int port = proxy_open(&px, &h);
  if (port < 0) _exit(3);
  handle_via_proxy(&h, port, &via);
  for (int i = first; i < last; i++) {
    struct record rec = {.trial = i, .outcome = -1};
    if (write(fd, &rec, sizeof rec) != (ssize_t)sizeof rec) _exit(4);
    run_trial(&p, lcomm, &via, &px, i, &rec);
    if (write(fd, &rec, sizeof rec) != (ssize_t)sizeof rec) _exit(4);
  }
  rn_net_close_listen(&p.net, lcomm);
  close(px.lfd);
  rn_net_close(&p.net);
  _exit(0);
}

int main(int argc, char **argv) {
  uint64_t seed = 0x5eedc0de;
  int limit = -1, only = -1, nflips_raw = 900, nflips_sem = 450;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trials") && i + 1 < argc)
      limit = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--verbose"))
      g_verbose = 1;
    else {
      fprintf(stderr, "usage: test_corrupt [--trials N] [--seed N] [--only K] [--verbose]\n");
      return 2;
    }
  }
  g_bound_s = (double)rn_env_long("RN_CORRUPT_BOUND_S", 5);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  setenv("RAILNET_SOCKET_FAMILY", "AF_INET", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 0);
  setenv("RAILNET_SOCKET_CHUNK", "4096", 1); /* several chunks per streamed message */
  setenv("RAILNET_SOCKET_INLINE", "256", 1);
  /* A sender whose ACK never comes fails within this, inside the bound. */
  setenv("RAILNET_RAIL_TIMEOUT_MS", "2000", 0);
  build_trials(seed, nflips_raw, nflips_sem);
  if (limit >= 0 && limit < ntrials) {
    /* an even spread over the list */
    struct trial *pick = malloc((size_t)limit * sizeof *pick);
    for (int i = 0; i < limit; i++) pick[i] = trials[(long)i * ntrials / limit];
    free(trials);
    trials = pick;
    ntrials = limit;
  }
  if (only >= 0) {
    if (only >= ntrials) {
      fprintf(stderr, "test_corrupt: --only %d: the list has trials 0..%d\n", only, ntrials - 1);
      return 2;
    }
    trials[0] = trials[only];
    ntrials = 1;
  }
  signal(SIGPIPE, SIG_IGN);
  tap_plan(1);
  note("%d trials (seed %llu), bound %.0f s each, RAILNET_SOCKET_NTHREADS=%s", ntrials,
       (unsigned long long)seed, g_bound_s * rn_timeout_scale(),
       getenv("RAILNET_SOCKET_NTHREADS") ? getenv("RAILNET_SOCKET_NTHREADS") : "auto");
  fflush(stdout);
  int count[NOUTCOMES] = {0}, by_mode[2][NOUTCOMES] = {{0}};
  struct {
    char cause[96];
    int n;
  } causes[64];
  memset(causes, 0, sizeof causes);
  int ncauses = 0, nfail = 0;
  double t0 = now_s();
  const int batch = 250;
  for (int first = 0; first < ntrials;) {
    int last = first + batch < ntrials ? first + batch : ntrials;
    /* a batch runs in one mode (run_batch) */
    for (int i = first + 1; i < last; i++)
      if (lazy_type(trials[i].type) != lazy_type(trials[first].type) ||
          trials[i].no_ack != trials[first].no_ack)
        last = i;
    int pfd[2];
    if (pipe(pfd) != 0) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      close(pfd[0]);
      run_batch(first, last, pfd[1]);
    }
    close(pfd[1]);
    struct record rec;
    int current = first, next = first;
    while (read(pfd[0], &rec, sizeof rec) == (ssize_t)sizeof rec) {
      if (rec.outcome < 0) {
        current = rec.trial;
        continue;
      }
      next = rec.trial + 1;
      count[rec.outcome]++;
      by_mode[trials[rec.trial].mode][rec.outcome]++;
      if (rec.outcome == O_DETECTED) {
        int k = 0;
        while (k < ncauses && strcmp(causes[k].cause, rec.cause) != 0) k++;
        if (k == ncauses && ncauses < 64) snprintf(causes[ncauses++].cause, 96, "%s", rec.cause);
        if (k < 64) causes[k].n++;
      }
      if (rec.outcome >= O_FAIL_HANG) {
        char d[200];
        describe(&trials[rec.trial], d, sizeof d);
        diag("trial %d: %s: %s (%s)", rec.trial, d, outcome_name[rec.outcome], rec.detail);
        nfail++;
      }
    }
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (WIFEXITED(st) && WEXITSTATUS(st) == 3 && first == 0) {
        printf("1..0 # SKIP the TCP transport has no loopback device here\n");
        return 0;
      }
      char d[200];
      describe(&trials[current], d, sizeof d);
      diag("trial %d: %s: %s (status 0x%x)", current, d, outcome_name[O_FAIL_CRASH], st);
      count[O_FAIL_CRASH]++;
      nfail++;
      next = current + 1;
    }
    first = next > first ? next : first + 1;
  }
  double secs = now_s() - t0;
  note("%d trials in %.1f s:                          all    raw  semantic", ntrials, secs);
  for (int o = 0; o < NOUTCOMES; o++)
    if (count[o] || o < O_FAIL_HANG)
      note("  %-45s %6d %6d %6d", outcome_name[o], count[o], by_mode[M_RAW][o],
           by_mode[M_SEMANTIC][o]);
  note("detections by the check that fired first:");
  for (int k = 0; k < ncauses; k++) note("  %-45s %6d", causes[k].cause, causes[k].n);
  tap_result(nfail == 0,
             "%d corruption trials: each ended in verified data or an error on the attacked side "
             "within %.0f s (%d failed)",
             ntrials, g_bound_s * rn_timeout_scale(), nfail);
  return nfail == 0 ? 0 : 1;
}
