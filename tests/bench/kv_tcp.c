/* The plain-TCP anchor: the least a TCP transport has to do to carry the
 * same messages, behind the same isend/irecv/test calls so that the proxy
 * model drives it exactly as it drives railnet.  Per comm one socket (or
 * `tcp_streams`, message i on socket i mod n); each message is a 16-byte
 * header and the payload, written straight from the caller's buffer with
 * writev (queued messages of a socket leave in one call); the receiver
 * reads payloads of 64 KiB or more straight into the posted buffer and
 * smaller ones through a 256 KiB staging buffer, many per recv().  No
 * clear-to-send: a sender never waits for its receiver, which is what makes
 * it the ideal.  maxRecvs is 1, so the model gives it no shared comms. */
#include "kv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define KV_TCP_MAGIC 0x6b767470u /* "kvtp" */
#define KV_TCP_MAX_STREAMS 8
#define KV_TCP_NREQS 256
#define KV_TCP_STAGE (256 * KV_KIB)
#define KV_TCP_DIRECT (64 * KV_KIB)
#define KV_TCP_IOV 32

struct kv_tcp_hdr {
  uint32_t magic;
  int32_t tag;
  uint64_t size;
};

struct kv_tcp_handle {
  uint32_t magic;
  uint16_t port;
  uint16_t nstreams;
  uint64_t nonce;
  char addr[64];
};
_Static_assert(sizeof(struct kv_tcp_handle) <= KV_HANDLE_BYTES, "handle fits NCCL's 128 bytes");

struct kv_tcp_comm;

struct kv_tcp_req {
  struct kv_tcp_comm *c;
  int used, done, is_send, stream;
  int tag;
  /* send: header then payload, `off` bytes of both written */
  struct kv_tcp_hdr hdr;
  const char *data;
  size_t size, off;
  /* recv */
  char *buf;
  size_t posted, got;
};

/* One socket of a comm with its FIFO of requests.  Owner: the comm. */
struct kv_tcp_stream {
  int fd;
  struct kv_tcp_req *q[KV_TCP_NREQS];
  int qh, qn;
  /* receive side */
  unsigned char *stage;
  size_t rd, wr;
  int have_hdr;
  struct kv_tcp_hdr cur;
  size_t cur_got;
};

struct kv_tcp_comm {
  int is_send, nstreams;
  uint64_t seq;
  struct kv_tcp_stream st[KV_TCP_MAX_STREAMS];
  struct kv_tcp_req reqs[KV_TCP_NREQS];
  int next_free;
  int failed;
};

struct kv_tcp_listen {
  int fd, nstreams, got;
  uint64_t nonce;
  int fds[KV_TCP_MAX_STREAMS];
};

static void set_fast(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int resolve(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  if (getaddrinfo(addr, ports, &hints, &ai) != 0 || ai == NULL) return -1;
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *len = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

static ncclResult_t tcp_listen(struct kv_net *n, void *handle, void **lcomm) {
  struct sockaddr_storage ss;
  socklen_t len;
  const char *addr = n->bind_addr[0] ? n->bind_addr : "127.0.0.1";
  if (resolve(addr, 0, &ss, &len) != 0) return ncclInvalidUsage;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct kv_tcp_listen *l = calloc(1, sizeof *l);
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  l->nstreams = n->tcp_streams < 1 ? 1 : n->tcp_streams;
  if (l->nstreams > KV_TCP_MAX_STREAMS) l->nstreams = KV_TCP_MAX_STREAMS;
  uint64_t seed = (uint64_t)(now_s() * 1e9) ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)l;
  l->nonce = rng_next(&seed);
  for (int i = 0; i < KV_TCP_MAX_STREAMS; i++) l->fds[i] = -1;
  struct kv_tcp_handle h;
  memset(&h, 0, sizeof h);
  h.magic = KV_TCP_MAGIC;
  h.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
  h.nstreams = (uint16_t)l->nstreams;
  h.nonce = l->nonce;
  snprintf(h.addr, sizeof h.addr, "%s", addr);
  memset(handle, 0, KV_HANDLE_BYTES);
  memcpy(handle, &h, sizeof h);
  *lcomm = l;
  return ncclSuccess;
}

static struct kv_tcp_comm *comm_new(int is_send, int nstreams) {
  struct kv_tcp_comm *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->is_send = is_send;
  c->nstreams = nstreams;
  for (int i = 0; i < KV_TCP_MAX_STREAMS; i++) c->st[i].fd = -1;
  if (!is_send)
    for (int i = 0; i < nstreams; i++)
      if ((c->st[i].stage = malloc(KV_TCP_STAGE)) == NULL) {
        for (int k = 0; k < i; k++) free(c->st[k].stage);
        free(c);
        return NULL;
      }
  return c;
}

static void comm_free(struct kv_tcp_comm *c) {
  for (int i = 0; i < KV_TCP_MAX_STREAMS; i++) {
    if (c->st[i].fd >= 0) close(c->st[i].fd);
    free(c->st[i].stage);
  }
  free(c);
}

static ncclResult_t tcp_connect(struct kv_net *n, void *handle, void **scomm) {
  (void)n;
  struct kv_tcp_handle h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != KV_TCP_MAGIC || h.nstreams < 1 || h.nstreams > KV_TCP_MAX_STREAMS)
    return ncclInvalidArgument;
  struct sockaddr_storage ss;
  socklen_t len;
  if (resolve(h.addr, h.port, &ss, &len) != 0) return ncclInvalidArgument;
  struct kv_tcp_comm *c = comm_new(1, h.nstreams);
  if (c == NULL) return ncclSystemError;
  for (int i = 0; i < h.nstreams; i++) {
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    c->st[i].fd = fd;
    uint64_t hello[2] = {h.nonce, (uint64_t)i};
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) != 0 ||
        send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
      comm_free(c);
      return ncclSystemError;
    }
    set_fast(fd);
  }
  *scomm = c;
  return ncclSuccess;
}

static ncclResult_t tcp_accept(struct kv_net *n, void *lcomm, void **rcomm) {
  (void)n;
  struct kv_tcp_listen *l = lcomm;
  *rcomm = NULL;
  while (l->got < l->nstreams) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
      return ncclSystemError;
    }
    uint64_t hello[2];
    size_t got = 0;
    double end = now_s() + 10;
    while (got < sizeof hello && now_s() < end) {
      struct pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t r = recv(fd, (char *)hello + got, sizeof hello - got, 0);
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got != sizeof hello || hello[0] != l->nonce || hello[1] >= (uint64_t)l->nstreams ||
        l->fds[hello[1]] >= 0) {
      close(fd); /* not ours */
      continue;
    }
    set_fast(fd);
    l->fds[hello[1]] = fd;
    l->got++;
  }
  struct kv_tcp_comm *c = comm_new(0, l->nstreams);
  if (c == NULL) return ncclSystemError;
  for (int i = 0; i < l->nstreams; i++) c->st[i].fd = l->fds[i], l->fds[i] = -1;
  l->got = 0;
  *rcomm = c;
  return ncclSuccess;
}

static ncclResult_t tcp_regmr(struct kv_net *n, void *comm, void *data, size_t size, void **mh) {
  (void)n, (void)comm, (void)data, (void)size;
  static int token;
  *mh = &token;
  return ncclSuccess;
}

static ncclResult_t tcp_deregmr(struct kv_net *n, void *comm, void *mh) {
  (void)n, (void)comm, (void)mh;
  return ncclSuccess;
}

static struct kv_tcp_req *req_get(struct kv_tcp_comm *c) {
  for (int k = 0; k < KV_TCP_NREQS; k++) {
    int i = (c->next_free + k) % KV_TCP_NREQS;
    if (!c->reqs[i].used) {
      c->next_free = (i + 1) % KV_TCP_NREQS;
      memset(&c->reqs[i], 0, sizeof c->reqs[i]);
      c->reqs[i].used = 1;
      c->reqs[i].c = c;
      return &c->reqs[i];
    }
  }
  return NULL;
}

/* Write what the socket takes of the queued messages, in order. */
static int send_progress(struct kv_tcp_stream *s) {
  while (s->qn > 0) {
    struct iovec iov[KV_TCP_IOV];
    int niov = 0;
    for (int k = 0; k < s->qn && niov + 2 <= KV_TCP_IOV; k++) {
      struct kv_tcp_req *r = s->q[(s->qh + k) % KV_TCP_NREQS];
      size_t off = r->off;
      if (off < sizeof r->hdr) {
        iov[niov].iov_base = (char *)&r->hdr + off;
        iov[niov++].iov_len = sizeof r->hdr - off;
        off = sizeof r->hdr;
      }
      if (r->size > off - sizeof r->hdr) {
        iov[niov].iov_base = (char *)r->data + (off - sizeof r->hdr);
        iov[niov++].iov_len = r->size - (off - sizeof r->hdr);
      }
    }
    ssize_t w = writev(s->fd, iov, niov);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    size_t left = (size_t)w;
    while (s->qn > 0) {
      struct kv_tcp_req *r = s->q[s->qh];
      size_t need = sizeof r->hdr + r->size - r->off;
      if (left < need) {
        r->off += left;
        break;
      }
      left -= need;
      r->off += need;
      r->done = 1;
      s->qh = (s->qh + 1) % KV_TCP_NREQS;
      s->qn--;
    }
  }
  return 0;
}

/* Read into the posted buffers of this socket's receives, in order. */
static int recv_progress(struct kv_tcp_stream *s) {
  for (;;) {
    if (!s->have_hdr) {
      if (s->wr - s->rd >= sizeof s->cur) {
        memcpy(&s->cur, s->stage + s->rd, sizeof s->cur);
        s->rd += sizeof s->cur;
        if (s->cur.magic != KV_TCP_MAGIC) return -1;
        s->have_hdr = 1;
        s->cur_got = 0;
      } else {
        if (s->rd > 0) {
          memmove(s->stage, s->stage + s->rd, s->wr - s->rd);
          s->wr -= s->rd;
          s->rd = 0;
        }
        ssize_t r = recv(s->fd, s->stage + s->wr, KV_TCP_STAGE - s->wr, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (r <= 0) return -1;
        s->wr += (size_t)r;
        continue;
      }
    }
    if (s->qn == 0) return 0; /* no buffer posted yet: leave the rest in the socket */
    struct kv_tcp_req *q = s->q[s->qh];
    if (s->cur.size > q->posted || s->cur.tag != q->tag) return -1;
    size_t want = s->cur.size - s->cur_got, have = s->wr - s->rd;
    size_t take = want < have ? want : have;
    if (take > 0) {
      memcpy(q->buf + s->cur_got, s->stage + s->rd, take);
      s->rd += take;
      s->cur_got += take;
      want -= take;
    }
    if (want > 0) {
      ssize_t r;
      if (want >= KV_TCP_DIRECT) {
        r = recv(s->fd, q->buf + s->cur_got, want, MSG_DONTWAIT);
        if (r > 0) s->cur_got += (size_t)r;
      } else {
        s->rd = s->wr = 0; /* the stage is empty here */
        r = recv(s->fd, s->stage, KV_TCP_STAGE, MSG_DONTWAIT);
        if (r > 0) s->wr = (size_t)r;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
      if (r <= 0) return -1;
      continue;
    }
    q->got = s->cur.size;
    q->done = 1;
    s->have_hdr = 0;
    s->qh = (s->qh + 1) % KV_TCP_NREQS;
    s->qn--;
  }
}

static ncclResult_t tcp_isend(struct kv_net *n, void *scomm, void *data, size_t size, int tag,
                              void *mh, void **req) {
  (void)n, (void)mh;
  struct kv_tcp_comm *c = scomm;
  *req = NULL;
  if (c->failed) return ncclRemoteError;
  struct kv_tcp_req *r = req_get(c);
  if (r == NULL) return ncclSuccess; /* retry later */
  r->is_send = 1;
  r->stream = (int)(c->seq++ % (uint64_t)c->nstreams);
  r->hdr.magic = KV_TCP_MAGIC;
  r->hdr.tag = tag;
  r->hdr.size = size;
  r->data = data;
  r->size = size;
  struct kv_tcp_stream *s = &c->st[r->stream];
  s->q[(s->qh + s->qn) % KV_TCP_NREQS] = r;
  s->qn++;
  if (send_progress(s) != 0) c->failed = 1;
  *req = r;
  return ncclSuccess;
}

static ncclResult_t tcp_irecv(struct kv_net *n, void *rcomm, int cnt, void **data,
                              const size_t *sizes, const int *tags, void **mhs, void **req) {
  (void)n, (void)mhs;
  struct kv_tcp_comm *c = rcomm;
  *req = NULL;
  if (cnt != 1) return ncclInvalidArgument; /* maxRecvs is 1 */
  if (c->failed) return ncclRemoteError;
  struct kv_tcp_req *r = req_get(c);
  if (r == NULL) return ncclSuccess;
  r->stream = (int)(c->seq++ % (uint64_t)c->nstreams);
  r->buf = data[0];
  r->posted = sizes[0];
  r->tag = tags[0];
  struct kv_tcp_stream *s = &c->st[r->stream];
  s->q[(s->qh + s->qn) % KV_TCP_NREQS] = r;
  s->qn++;
  *req = r;
  return ncclSuccess;
}

static ncclResult_t tcp_test(struct kv_net *n, void *request, int *done, int *sizes) {
  (void)n;
  struct kv_tcp_req *r = request;
  struct kv_tcp_comm *c = r->c;
  *done = 0;
  if (!r->done) {
    struct kv_tcp_stream *s = &c->st[r->stream];
    if ((r->is_send ? send_progress(s) : recv_progress(s)) != 0) c->failed = 1;
  }
  if (c->failed && !r->done) return ncclRemoteError;
  if (!r->done) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = (int)(r->is_send ? r->size : r->got);
  r->used = 0;
  return ncclSuccess;
}

static ncclResult_t tcp_close(struct kv_net *n, void *comm) {
  (void)n;
  if (comm != NULL) comm_free(comm);
  return ncclSuccess;
}

static ncclResult_t tcp_close_listen(struct kv_net *n, void *lcomm) {
  (void)n;
  struct kv_tcp_listen *l = lcomm;
  if (l == NULL) return ncclSuccess;
  for (int i = 0; i < KV_TCP_MAX_STREAMS; i++)
    if (l->fds[i] >= 0) close(l->fds[i]);
  close(l->fd);
  free(l);
  return ncclSuccess;
}

const struct kv_net_ops kv_tcp_ops = {
    .name = "plain TCP",
    .listen = tcp_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .regmr = tcp_regmr,
    .deregmr = tcp_deregmr,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .close_send = tcp_close,
    .close_recv = tcp_close,
    .close_listen = tcp_close_listen,
};

int kv_net_open_tcp(struct kv_net *n, const char *bind_addr, int streams) {
  memset(n, 0, sizeof *n);
  n->ops = &kv_tcp_ops;
  n->max_recvs = 1;
  n->traffic_class = -1;
  n->tcp_streams = streams;
  snprintf(n->bind_addr, sizeof n->bind_addr, "%s", bind_addr ? bind_addr : "127.0.0.1");
  return 0;
}

/* In one process: a comm of 2 sockets, messages of assorted sizes both
 * ways through the staging and the direct path, every byte checked. */
int kv_tcp_selftest(char *why, size_t whylen) {
  struct kv_net n;
  kv_net_open_tcp(&n, "127.0.0.1", 2);
  char handle[KV_HANDLE_BYTES];
  void *lc = NULL, *sc = NULL, *rc = NULL;
  if (tcp_listen(&n, handle, &lc) != ncclSuccess || tcp_connect(&n, handle, &sc) != ncclSuccess) {
    snprintf(why, whylen, "listen/connect on 127.0.0.1 failed");
    return -1;
  }
  double end = now_s() + 10;
  while (rc == NULL && now_s() < end)
    if (tcp_accept(&n, lc, &rc) != ncclSuccess) break;
  tcp_close_listen(&n, lc);
  int ok = rc != NULL;
  static const size_t sizes[] = {0, 1, 15, 16, 4096, 65535, 65536, 200000, 3, 1 << 20};
  enum { N = sizeof sizes / sizeof sizes[0] };
  char *sb[N], *rb[N];
  void *sr[N], *rr[N];
  for (int i = 0; i < N; i++) {
    sb[i] = malloc(sizes[i] + 1);
    rb[i] = malloc(sizes[i] + 64);
    pattern_fill(sb[i], sizes[i], (uint64_t)i + 77);
  }
  for (int i = 0; ok && i < N; i++) {
    size_t post = sizes[i] + 64;
    int tag = 3;
    void *d = rb[i];
    ok = tcp_irecv(&n, rc, 1, &d, &post, &tag, NULL, &rr[i]) == ncclSuccess && rr[i] != NULL &&
         tcp_isend(&n, sc, sb[i], sizes[i], 3, NULL, &sr[i]) == ncclSuccess && sr[i] != NULL;
  }
  for (int i = 0; ok && i < N; i++) {
    int ds = 0, dr = 0, got = -1;
    while (ok && (!ds || !dr) && now_s() < end) {
      if (!ds) ok = tcp_test(&n, sr[i], &ds, NULL) == ncclSuccess;
      if (ok && !dr) ok = tcp_test(&n, rr[i], &dr, &got) == ncclSuccess;
    }
    if (!ok || !ds || !dr || (size_t)got != sizes[i] ||
        pattern_check(rb[i], sizes[i], (uint64_t)i + 77) != (size_t)-1) {
      snprintf(why, whylen, "message %d (%zu B): done %d/%d, got %d bytes or wrong data", i,
               sizes[i], ds, dr, got);
      ok = 0;
    }
  }
  for (int i = 0; i < N; i++) free(sb[i]), free(rb[i]);
  tcp_close(&n, sc);
  tcp_close(&n, rc);
  if (!ok && why[0] == '\0') snprintf(why, whylen, "transfer failed");
  return ok ? 0 : -1;
}
