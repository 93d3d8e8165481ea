/* heap_counter: an LD_PRELOAD library that counts the bytes a process holds from malloc and its
 * kin, and the highest count since the last reset, on every thread. The Python peers use it for
 * their peak memory (benchmarks/python_fsdp_loop.py): torch.profiler's memory events see only the
 * threads it profiles, and on torch 2.6's CPU FSDP2 a steady-state step's events do not balance
 * (about one unit's buffer a step more allocated than freed), so their running sum is no exact
 * peak. LibTorch's CPU allocator takes its memory with posix_memalign, so every tensor is counted,
 * with what Python, Gloo and the rest allocate beside it.
 *
 * Each block is counted at malloc_usable_size, when it is given and when it is freed. The real
 * allocators are glibc's __libc_* entry points, which need no dlsym (dlsym itself allocates).
 * Read through ctypes: heap_counter_live(), heap_counter_peak(), heap_counter_reset_peak().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

static _Atomic int64_t live_bytes;
static _Atomic int64_t peak_bytes;

static void* counted(void* p) {
  if (p != NULL) {
    const int64_t now = atomic_fetch_add(&live_bytes, (int64_t)malloc_usable_size(p)) + (int64_t)malloc_usable_size(p);
    int64_t peak = atomic_load(&peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
    }
  }
  return p;
}

static void uncount(void* p) {
  if (p != NULL) atomic_fetch_sub(&live_bytes, (int64_t)malloc_usable_size(p));
}

void* malloc(size_t n) { return counted(__libc_malloc(n)); }
void* calloc(size_t k, size_t n) { return counted(__libc_calloc(k, n)); }
void free(void* p) {
  uncount(p);
  __libc_free(p);
}
void* realloc(void* p, size_t n) {
  if (p == NULL) return malloc(n);
  if (n == 0) {
    free(p);
    return NULL;
  }
  const size_t before = malloc_usable_size(p);
  void* q = __libc_realloc(p, n);
  if (q == NULL) return NULL; /* p is untouched, still counted */
  atomic_fetch_sub(&live_bytes, (int64_t)before);
  return counted(q);
}
void* memalign(size_t alignment, size_t n) { return counted(__libc_memalign(alignment, n)); }
void* aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }
int posix_memalign(void** out, size_t alignment, size_t n) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = memalign(alignment, n);
  if (p == NULL && n != 0) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) { return memalign(4096, n); }

int64_t heap_counter_live(void) { return atomic_load(&live_bytes); }
int64_t heap_counter_peak(void) { return atomic_load(&peak_bytes); }
void heap_counter_reset_peak(void) { atomic_store(&peak_bytes, atomic_load(&live_bytes)); }
