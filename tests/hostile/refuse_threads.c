/* Test shim (LD_PRELOAD): pthread_create fails with EAGAIN, as under a container's pids limit or RLIMIT_NPROC,
 * while REFUSE_THREADS_AFTER threads started through it are still running (a limit on live threads, like the
 * real ones). Root ignores RLIMIT_NPROC, so the tests cannot use the real limit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
static atomic_int live;

struct start {
  void* (*fn)(void*);
  void* arg;
};

static void* run(void* p) {
  struct start s = *(struct start*)p;
  free(p);
  void* r = s.fn(s.arg);
  atomic_fetch_sub(&live, 1);
  return r;
}

int pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  static create_fn real;
  if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
  const char* e = getenv("REFUSE_THREADS_AFTER");
  if (!e) return real(t, attr, fn, arg);
  if (atomic_fetch_add(&live, 1) >= atoi(e)) {
    atomic_fetch_sub(&live, 1);
    return EAGAIN;
  }
  struct start* s = malloc(sizeof *s);
  if (!s) {
    atomic_fetch_sub(&live, 1);
    return EAGAIN;
  }
  s->fn = fn;
  s->arg = arg;
  const int rc = real(t, attr, run, s);
  if (rc != 0) {
    free(s);
    atomic_fetch_sub(&live, 1);
  }
  return rc;
}
