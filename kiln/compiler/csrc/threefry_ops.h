
static inline void kiln_tf(uint32_t k0, uint32_t k1, uint64_t c, uint32_t *a, uint32_t *b) {
  tf(k0, k1, (uint32_t)(c >> 32), (uint32_t)c, a, b);
}
static inline uint32_t kiln_tf_xor(uint32_t k0, uint32_t k1, uint64_t c) {
  uint32_t a, b; kiln_tf(k0, k1, c, &a, &b); return a ^ b; }
static inline uint64_t kiln_tf_cat(uint32_t k0, uint32_t k1, uint64_t c) {
  uint32_t a, b; kiln_tf(k0, k1, c, &a, &b); return ((uint64_t)a << 32) | b; }
static inline uint32_t kiln_tf_pick(uint32_t k0, uint32_t k1, uint64_t c, int64_t w) {
  uint32_t a, b; kiln_tf(k0, k1, c, &a, &b); return w ? b : a; }
