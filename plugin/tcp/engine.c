/* The TCP progress engine: one pool of helper threads per process that
 * moves the bytes of every comm's data streams (when helpers are on).
 *
 * RAILNET_SOCKET_NTHREADS threads in all (bounded by the CPU count), not
 * per comm.  Each stream belongs to one thread, chosen round-robin when
 * its comm is created, and is registered edge-triggered in that thread's
 * epoll set; a thread sleeps in epoll_wait on its streams and one eventfd.
 * Work the caller queues (a chunk to send, a stream the sender retired, a
 * socket swapped in by a re-admitted rail) puts the stream on its thread's
 * ready list (O(1), the thread's own lock) and writes the eventfd only
 * when the thread sleeps.  Nothing on isend/irecv/test walks all comms or
 * takes a process-wide lock.
 *
 * Close: a comm leaves the engine before its memory goes (rn_tcp_engine_
 * detach): its streams are unregistered, taken off the ready lists, and
 * the close waits until no thread is stepping one of them.  An epoll
 * event names its stream by a slot and a generation, never a pointer, so
 * an event read before the close finds an empty or reused slot and is
 * dropped.
 *
 * Fork: the child has none of the threads; a pthread_atfork handler
 * forgets the pool there (its descriptors closed), and the child's first
 * comm with helpers starts a new one.  The transport's fini (at finalize,
 * and at unload through the core's teardown) stops the pool, threads
 * joined, after closing every comm, before the code they run can be
 * unmapped. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_ENGINE_EVENTS 64

struct rn_tcp_engine_thread {
  pthread_t tid;
  int epfd, wake_fd;
  pthread_mutex_t lock; /* the ready list, the slots, current */
  pthread_cond_t idle;  /* current went back to NULL */
  struct rn_tcp_stream *ready_head, *ready_tail;
  struct rn_tcp_stream *current; /* being stepped now, outside the lock */
  struct rn_tcp_stream **slot;   /* registered streams, by slot */
  uint32_t *gen;                 /* each slot's generation */
  int nslots, free_slot;         /* free_slot: a hint */
  int stop, waiters;
  atomic_int sleeping;
};

static struct {
  pthread_mutex_t lock; /* start/stop, nthreads, users */
  int nthreads;         /* running threads; 0: not started */
  struct rn_tcp_engine_thread *t;
  atomic_uint next; /* round-robin over threads for new streams */
  int atfork;
  int epoch; /* bumped in a forked child: streams of the parent's pool are not ours */
} rn_tcp_eng = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void rn_tcp_engine_child(void) {
  /* Only this thread exists here; the parent's pool is not ours. */
  pthread_mutex_init(&rn_tcp_eng.lock, NULL);
  for (int i = 0; i < rn_tcp_eng.nthreads; i++) {
    close(rn_tcp_eng.t[i].epfd);
    close(rn_tcp_eng.t[i].wake_fd);
    free(rn_tcp_eng.t[i].slot);
    free(rn_tcp_eng.t[i].gen);
  }
  free(rn_tcp_eng.t);
  rn_tcp_eng.t = NULL;
  rn_tcp_eng.nthreads = 0;
  rn_tcp_eng.epoch++;
}

/* The engine thread that drives s, or NULL (helpers off, or a comm the
 * child of a fork inherited: its pool is gone, nothing drives it). */
static struct rn_tcp_engine_thread *rn_tcp_engine_of(const struct rn_tcp_stream *s) {
  if (s->eng_thread < 0 || s->eng_epoch != rn_tcp_eng.epoch) return NULL;
  return &rn_tcp_eng.t[s->eng_thread];
}

int rn_tcp_engine_size(void) {
  /* Asked once: every comm's creation wants it, and the C library reads
   * it from sysfs each time. */
  static atomic_long online;
  long cpus = atomic_load(&online);
  if (cpus == 0) {
    cpus = sysconf(_SC_NPROCESSORS_ONLN);
    atomic_store(&online, cpus);
  }
  int n = (int)rn_params()->socket_nthreads;
  if (n < 0) n = cpus < 8 ? 0 : 4;
  if (cpus > 0 && n > cpus) n = (int)cpus;
  return n;
}

static void rn_tcp_engine_step(struct rn_tcp_stream *s, short re) {
  rn_tcp_stream_step(s->comm, s, re, SIZE_MAX);
}

/* Take the next ready stream as current; NULL when none. */
static struct rn_tcp_stream *rn_tcp_engine_pop(struct rn_tcp_engine_thread *t) {
  struct rn_tcp_stream *s = t->ready_head;
  if (s == NULL) return NULL;
  t->ready_head = s->ready_next;
  if (t->ready_head == NULL) t->ready_tail = NULL;
  s->ready_next = NULL;
  s->on_ready = 0;
  t->current = s;
  return s;
}

static void rn_tcp_engine_done(struct rn_tcp_engine_thread *t) {
  t->current = NULL;
  if (t->waiters) pthread_cond_broadcast(&t->idle);
}

static void *rn_tcp_engine_main(void *arg) {
  struct rn_tcp_engine_thread *t = arg;
  struct epoll_event ev[RN_TCP_ENGINE_EVENTS];
  rn_tcp_on_helper = 1; /* failures leave the shutdown to the caller (fail.c) */
  pthread_mutex_lock(&t->lock);
  while (!t->stop) {
    /* Streams with queued work first, each once per pass. */
    struct rn_tcp_stream *s;
    for (int budget = t->nslots + 1; budget > 0 && (s = rn_tcp_engine_pop(t)) != NULL; budget--) {
      pthread_mutex_unlock(&t->lock);
      rn_tcp_engine_step(s, s->comm->is_recv ? POLLIN : 0);
      pthread_mutex_lock(&t->lock);
      rn_tcp_engine_done(t);
    }
    int wait = t->ready_head != NULL ? 0 : -1;
    if (wait < 0) atomic_store(&t->sleeping, 1);
    pthread_mutex_unlock(&t->lock);
    int n = epoll_wait(t->epfd, ev, RN_TCP_ENGINE_EVENTS, wait);
    atomic_store(&t->sleeping, 0);
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < n && !t->stop; i++) {
      uint64_t tok = ev[i].data.u64;
      if (tok == UINT64_MAX) {
        uint64_t v;
        ssize_t rd = read(t->wake_fd, &v, sizeof(v));
        (void)rd;
        continue;
      }
      int idx = (int)(tok & 0xffffffffu);
      if (idx >= t->nslots || t->slot[idx] == NULL || t->gen[idx] != (uint32_t)(tok >> 32))
        continue; /* its comm closed meanwhile */
      s = t->slot[idx];
      short re = 0;
      if (ev[i].events & (EPOLLIN | EPOLLRDHUP)) re |= POLLIN;
      if (ev[i].events & EPOLLOUT) re |= POLLOUT;
      if (ev[i].events & EPOLLERR) re |= POLLERR;
      if (ev[i].events & EPOLLHUP) re |= POLLHUP;
      t->current = s;
      pthread_mutex_unlock(&t->lock);
      rn_tcp_engine_step(s, re);
      pthread_mutex_lock(&t->lock);
      rn_tcp_engine_done(t);
    }
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

static void rn_tcp_engine_signal(struct rn_tcp_engine_thread *t) {
  uint64_t one = 1;
  ssize_t wr = write(t->wake_fd, &one, sizeof(one));
  (void)wr;
}

/* Stop and join every thread; rn_tcp_eng.lock held. */
static void rn_tcp_engine_stop_locked(void) {
  for (int i = 0; i < rn_tcp_eng.nthreads; i++) {
    struct rn_tcp_engine_thread *t = &rn_tcp_eng.t[i];
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_mutex_unlock(&t->lock);
    rn_tcp_engine_signal(t);
  }
  for (int i = 0; i < rn_tcp_eng.nthreads; i++) {
    struct rn_tcp_engine_thread *t = &rn_tcp_eng.t[i];
    pthread_join(t->tid, NULL);
    close(t->epfd);
    close(t->wake_fd);
    free(t->slot);
    free(t->gen);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->idle);
  }
  free(rn_tcp_eng.t);
  rn_tcp_eng.t = NULL;
  rn_tcp_eng.nthreads = 0;
}

void rn_tcp_engine_stop(void) {
  pthread_mutex_lock(&rn_tcp_eng.lock);
  if (rn_tcp_eng.nthreads > 0)
    RN_INFO(NCCL_NET, "progress engine: %d thread(s) stopped", rn_tcp_eng.nthreads);
  rn_tcp_engine_stop_locked();
  pthread_mutex_unlock(&rn_tcp_eng.lock);
}

/* Start n threads; rn_tcp_eng.lock held.  ncclSuccess or ncclSystemError
 * (WARNed), with nothing left running. */
static ncclResult_t rn_tcp_engine_start_locked(int n) {
  if (!rn_tcp_eng.atfork) {
    if (pthread_atfork(NULL, NULL, rn_tcp_engine_child) != 0) {
      RN_WARN("progress engine: pthread_atfork failed");
      return ncclSystemError;
    }
    rn_tcp_eng.atfork = 1;
  }
  rn_tcp_eng.t = calloc((size_t)n, sizeof(*rn_tcp_eng.t));
  if (rn_tcp_eng.t == NULL) {
    RN_WARN("progress engine: out of memory");
    return ncclSystemError;
  }
  for (int i = 0; i < n; i++) {
    struct rn_tcp_engine_thread *t = &rn_tcp_eng.t[i];
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    int err = t->epfd < 0 || t->wake_fd < 0                            ? errno
              : epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wake_fd, &e) != 0 ? errno
                                                                       : 0;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->idle, NULL);
    if (err == 0) err = pthread_create(&t->tid, NULL, rn_tcp_engine_main, t);
    if (err != 0) {
      RN_WARN("progress engine: cannot start thread %d of %d: %s", i, n, strerror(err));
      if (t->epfd >= 0) close(t->epfd);
      if (t->wake_fd >= 0) close(t->wake_fd);
      pthread_mutex_destroy(&t->lock);
      pthread_cond_destroy(&t->idle);
      rn_tcp_eng.nthreads = i;
      rn_tcp_engine_stop_locked();
      return ncclSystemError;
    }
  }
  rn_tcp_eng.nthreads = n;
  RN_INFO(NCCL_NET, "progress engine: %d thread(s) for the data streams of every comm", n);
  return ncclSuccess;
}

/* Register s in t's epoll set; t->lock held.  0 or an errno. */
static int rn_tcp_engine_add_locked(struct rn_tcp_engine_thread *t, struct rn_tcp_stream *s) {
  int idx = -1;
  for (int k = 0; k < t->nslots; k++) {
    int j = (t->free_slot + k) % t->nslots;
    if (t->slot[j] == NULL) {
      idx = j;
      break;
    }
  }
  if (idx < 0) {
    int cap = t->nslots ? 2 * t->nslots : 64;
    struct rn_tcp_stream **ns = realloc(t->slot, (size_t)cap * sizeof(*ns));
    if (ns == NULL) return ENOMEM;
    t->slot = ns;
    uint32_t *ng = realloc(t->gen, (size_t)cap * sizeof(*ng));
    if (ng == NULL) return ENOMEM;
    t->gen = ng;
    for (int k = t->nslots; k < cap; k++) {
      t->slot[k] = NULL;
      t->gen[k] = 0;
    }
    idx = t->nslots;
    t->nslots = cap;
  }
  t->gen[idx]++;
  uint64_t tok = ((uint64_t)t->gen[idx] << 32) | (uint32_t)idx;
  struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = tok};
  if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, s->fd, &e) != 0) return errno;
  t->slot[idx] = s;
  t->free_slot = idx + 1;
  s->eng_slot = idx;
  return 0;
}

/* Unregister s and take it off the ready list; t->lock held. */
static void rn_tcp_engine_remove_locked(struct rn_tcp_engine_thread *t, struct rn_tcp_stream *s) {
  if (s->eng_slot >= 0) {
    if (s->fd >= 0) (void)epoll_ctl(t->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    t->slot[s->eng_slot] = NULL;
    t->free_slot = s->eng_slot;
    s->eng_slot = -1;
  }
  if (s->on_ready) {
    struct rn_tcp_stream **pp = &t->ready_head, *prev = NULL;
    while (*pp != s) {
      prev = *pp;
      pp = &(*pp)->ready_next;
    }
    *pp = s->ready_next;
    if (t->ready_tail == s) t->ready_tail = prev;
    s->ready_next = NULL;
    s->on_ready = 0;
  }
}

ncclResult_t rn_tcp_engine_attach(struct rn_tcp_comm *c) {
  int want = rn_tcp_engine_size();
  c->nthreads = 0;
  for (int i = 0; i < c->nstreams; i++) {
    c->stream[i].comm = c;
    c->stream[i].eng_thread = -1;
    c->stream[i].eng_slot = -1;
  }
  if (want == 0) return ncclSuccess;
  pthread_mutex_lock(&rn_tcp_eng.lock);
  ncclResult_t res = ncclSuccess;
  if (rn_tcp_eng.nthreads == 0) res = rn_tcp_engine_start_locked(want);
  int n = rn_tcp_eng.nthreads;
  pthread_mutex_unlock(&rn_tcp_eng.lock);
  if (res != ncclSuccess) return res;
  /* The pool outlives comms until finalize/unload stop it, which happens
   * only once no comm is open: its size is fixed here. */
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    int ti = (int)(atomic_fetch_add(&rn_tcp_eng.next, 1) % (unsigned)n);
    struct rn_tcp_engine_thread *t = &rn_tcp_eng.t[ti];
    /* A stream without a socket (its rail left out at connect) is
     * registered with the one it gets (rn_tcp_engine_swap_fd). */
    int err = 0;
    if (s->fd >= 0) {
      pthread_mutex_lock(&t->lock);
      err = rn_tcp_engine_add_locked(t, s);
      pthread_mutex_unlock(&t->lock);
    }
    if (err != 0) {
      RN_WARN("progress engine: cannot register a data stream to %s: %s", c->peer, strerror(err));
      rn_tcp_engine_detach(c);
      return ncclSystemError;
    }
    s->eng_thread = ti;
    s->eng_epoch = rn_tcp_eng.epoch;
  }
  c->nthreads = n < c->nstreams ? n : c->nstreams;
  return ncclSuccess;
}

void rn_tcp_engine_detach(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    struct rn_tcp_engine_thread *t = rn_tcp_engine_of(s);
    s->eng_thread = -1;
    if (t == NULL) continue;
    pthread_mutex_lock(&t->lock);
    rn_tcp_engine_remove_locked(t, s);
    t->waiters++;
    while (t->current == s) pthread_cond_wait(&t->idle, &t->lock);
    t->waiters--;
    pthread_mutex_unlock(&t->lock);
  }
}

void rn_tcp_engine_swap_fd(struct rn_tcp_stream *s, int fd) {
  struct rn_tcp_engine_thread *t = rn_tcp_engine_of(s);
  if (t == NULL) {
    s->fd = fd;
    return;
  }
  pthread_mutex_lock(&t->lock);
  rn_tcp_engine_remove_locked(t, s);
  t->waiters++;
  while (t->current == s) pthread_cond_wait(&t->idle, &t->lock);
  t->waiters--;
  s->fd = fd;
  int err = rn_tcp_engine_add_locked(t, s);
  pthread_mutex_unlock(&t->lock);
  if (err != 0) {
    /* The stream stays dead: its rail is taken out again and retried. */
    RN_WARN("progress engine: cannot register a re-admitted data stream to %s: %s", s->comm->peer,
            strerror(err));
    snprintf(s->cause, sizeof(s->cause), "cannot register it: %s", strerror(err));
    s->lost = 1;
    atomic_store(&s->dead, 1);
  }
}

void rn_tcp_wake(struct rn_tcp_comm *c, int stream) {
  struct rn_tcp_engine_thread *t = rn_tcp_engine_of(&c->stream[stream]);
  struct rn_tcp_stream *s = &c->stream[stream];
  if (t == NULL) return;
  pthread_mutex_lock(&t->lock);
  if (!s->on_ready && s->eng_slot >= 0) {
    s->on_ready = 1;
    s->ready_next = NULL;
    if (t->ready_tail != NULL)
      t->ready_tail->ready_next = s;
    else
      t->ready_head = s;
    t->ready_tail = s;
  }
  pthread_mutex_unlock(&t->lock);
  if (atomic_load(&t->sleeping)) rn_tcp_engine_signal(t);
}

void rn_tcp_wake_all(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nstreams; i++) rn_tcp_wake(c, i);
}
