static inline uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

#define ROUND(a, b, r) do { a += b; b = rotl(b, r); b ^= a; } while (0)

static inline void tf(uint32_t a, uint32_t b, uint32_t v0, uint32_t v1,
                      uint32_t *o0, uint32_t *o1) {
  uint32_t c = a ^ b ^ 0x1BD11BDAu;
  v0 += a; v1 += b;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += b; v1 += c + 1u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += c; v1 += a + 2u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += a; v1 += b + 3u;
  ROUND(v0, v1, 17); ROUND(v0, v1, 29); ROUND(v0, v1, 16); ROUND(v0, v1, 24);
  v0 += b; v1 += c + 4u;
  ROUND(v0, v1, 13); ROUND(v0, v1, 15); ROUND(v0, v1, 26); ROUND(v0, v1, 6);
  v0 += c; v1 += a + 5u;
  *o0 = v0; *o1 = v1;
}

