/* Test-only plugins that misbehave on purpose: the example plugin (examples/plugin) with a hook that, on the cases
 * with Lq 15 or 17, crashes, aborts, hangs, exits 0, writes past its output or into its input, or allocates 1 GiB;
 * the *_BACKWARD kinds abort or write past dq only in a backward request. Every other case is computed correctly,
 * so a test can see the rest of the run go on. Built once per HOSTILE_<KIND> macro. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "attncheck/plugin.h"

#if defined(HOSTILE_CRASH_BACKWARD) || defined(HOSTILE_OOB_BACKWARD)
/* The backward kinds misbehave only in a backward request (extension tag 5): the forward of the same case is fine. */
static const attncheck_ext_backward* hostile_backward(const attncheck_problem* p) {
  for (const attncheck_extension* e = p->next; e; e = e->next)
    if (e->tag == ATTNCHECK_EXT_BACKWARD) return (const attncheck_ext_backward*)e;
  return NULL;
}
#define HOSTILE_TRIGGER(p) (((p)->Lq == 15 || (p)->Lq == 17) && hostile_backward(p))
#else
#define HOSTILE_TRIGGER(p) ((p)->Lq == 15 || (p)->Lq == 17)
#endif

static void hostile(const attncheck_problem* p) {
  if (!HOSTILE_TRIGGER(p)) return;
  fprintf(stderr, "hostile plugin: misbehaving on Lq=%lld\n", (long long)p->Lq);
  fflush(stderr);
#if defined(HOSTILE_CRASH)
  volatile int* null = (volatile int*)(size_t)(p->B - p->B);
  *null = 1; /* NULL dereference */
#elif defined(HOSTILE_ABORT)
  abort();
#elif defined(HOSTILE_HANG)
  for (;;) pause();
#elif defined(HOSTILE_EXIT0)
  exit(0);
#elif defined(HOSTILE_OOB)
  /* out is [B,Hq,Lq,Dv] fp32; write 3 floats past its last element */
  ((float*)p->out)[p->B * p->Hq * p->Lq * p->Dv + 2] = 1.0f;
#elif defined(HOSTILE_WRITE_INPUT)
  ((float*)(size_t)p->q)[5] += 1.0f;
#elif defined(HOSTILE_CRASH_BACKWARD)
  abort();
#elif defined(HOSTILE_OOB_BACKWARD)
  /* dq is [B,Hq,Lq,Dqk] fp32; write one float past its last element */
  ((float*)hostile_backward(p)->dq)[p->B * p->Hq * p->Lq * p->Dqk] = 1.0f;
#elif defined(HOSTILE_ALLOC)
  { /* 1 GiB: fine on any test machine, refused under --memory-limit 256 */
    void* m = malloc((size_t)1 << 30);
    if (!m) {
      fprintf(stderr, "hostile plugin: malloc of 1 GiB failed\n");
      abort();
    }
    free(m);
  }
#endif
}

#if defined(HOSTILE_CRASH)
#define EXAMPLE_PLUGIN_NAME "hostile-crash"
#elif defined(HOSTILE_ABORT)
#define EXAMPLE_PLUGIN_NAME "hostile-abort"
#elif defined(HOSTILE_HANG)
#define EXAMPLE_PLUGIN_NAME "hostile-hang"
#elif defined(HOSTILE_EXIT0)
#define EXAMPLE_PLUGIN_NAME "hostile-exit0"
#elif defined(HOSTILE_OOB)
#define EXAMPLE_PLUGIN_NAME "hostile-oob"
#elif defined(HOSTILE_WRITE_INPUT)
#define EXAMPLE_PLUGIN_NAME "hostile-write-input"
#elif defined(HOSTILE_ALLOC)
#define EXAMPLE_PLUGIN_NAME "hostile-alloc"
#elif defined(HOSTILE_CRASH_BACKWARD)
#define EXAMPLE_PLUGIN_NAME "hostile-crash-backward"
#elif defined(HOSTILE_OOB_BACKWARD)
#define EXAMPLE_PLUGIN_NAME "hostile-oob-backward"
#endif
#define EXAMPLE_PLUGIN_HOOK hostile
#include "../../examples/plugin/example_plugin.c"
