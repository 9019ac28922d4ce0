
#if defined(__AVX__)
#include <immintrin.h>
#endif
/* Copy n bytes to dst with non-temporal (streaming) stores where the processor has
   them: a large output then costs one write instead of a read-for-ownership plus a
   write, and does not evict the inputs from the cache. kiln_stream_fence follows. */
static inline void kiln_stream(void *dst, const void *src, int64_t n) {
#if defined(__AVX__)
  char *d = (char *)dst;
  const char *s = (const char *)src;
  int64_t head = (int64_t)((32 - ((uintptr_t)d & 31)) & 31);
  if (head > n) head = n;
  memcpy(d, s, (size_t)head);
  int64_t i = head;
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
  memcpy(d + i, s + i, (size_t)(n - i));
#else
  memcpy(dst, src, (size_t)n);
#endif
}
/* Orders this thread's streaming stores before what follows (each thread, once, after
   its last kiln_stream: a fence per tile would drain the write-combining buffers
   every 4 KB and halve the bandwidth). */
static inline void kiln_stream_fence(void) {
#if defined(__AVX__)
  _mm_sfence();
#endif
}
