
static inline int8_t kiln_div_i8(int8_t a, int8_t b) {
  return b == 0 ? (int8_t)-1 : (b == -1 ? (int8_t)((uint8_t)0 - (uint8_t)a) : (int8_t)(a / b)); }
static inline int8_t kiln_rem_i8(int8_t a, int8_t b) {
  return b == 0 ? a : (b == -1 ? (int8_t)0 : (int8_t)(a % b)); }
static inline int8_t kiln_shl_i8(int8_t a, int8_t b) {
  return (uint8_t)b < 8 ? (int8_t)((uint8_t)a << (uint8_t)b) : (int8_t)0; }
static inline int8_t kiln_shrl_i8(int8_t a, int8_t b) {
  return (uint8_t)b < 8 ? (int8_t)((uint8_t)a >> (uint8_t)b) : (int8_t)0; }
static inline int8_t kiln_shra_i8(int8_t a, int8_t b) {
  return (int8_t)((int8_t)a >> ((uint8_t)b < 8 ? (uint8_t)b : 8 - 1)); }

static inline uint8_t kiln_div_u8(uint8_t a, uint8_t b) { return b == 0 ? (uint8_t)~(uint8_t)0 : (uint8_t)(a / b); }
static inline uint8_t kiln_rem_u8(uint8_t a, uint8_t b) { return b == 0 ? a : (uint8_t)(a % b); }
static inline uint8_t kiln_shl_u8(uint8_t a, uint8_t b) {
  return b < 8 ? (uint8_t)(a << b) : (uint8_t)0; }
static inline uint8_t kiln_shrl_u8(uint8_t a, uint8_t b) {
  return b < 8 ? (uint8_t)(a >> b) : (uint8_t)0; }
static inline uint8_t kiln_shra_u8(uint8_t a, uint8_t b) {
  return (uint8_t)((int8_t)a >> (b < 8 ? b : 8 - 1)); }

static inline int16_t kiln_div_i16(int16_t a, int16_t b) {
  return b == 0 ? (int16_t)-1 : (b == -1 ? (int16_t)((uint16_t)0 - (uint16_t)a) : (int16_t)(a / b)); }
static inline int16_t kiln_rem_i16(int16_t a, int16_t b) {
  return b == 0 ? a : (b == -1 ? (int16_t)0 : (int16_t)(a % b)); }
static inline int16_t kiln_shl_i16(int16_t a, int16_t b) {
  return (uint16_t)b < 16 ? (int16_t)((uint16_t)a << (uint16_t)b) : (int16_t)0; }
static inline int16_t kiln_shrl_i16(int16_t a, int16_t b) {
  return (uint16_t)b < 16 ? (int16_t)((uint16_t)a >> (uint16_t)b) : (int16_t)0; }
static inline int16_t kiln_shra_i16(int16_t a, int16_t b) {
  return (int16_t)((int16_t)a >> ((uint16_t)b < 16 ? (uint16_t)b : 16 - 1)); }

static inline uint16_t kiln_div_u16(uint16_t a, uint16_t b) { return b == 0 ? (uint16_t)~(uint16_t)0 : (uint16_t)(a / b); }
static inline uint16_t kiln_rem_u16(uint16_t a, uint16_t b) { return b == 0 ? a : (uint16_t)(a % b); }
static inline uint16_t kiln_shl_u16(uint16_t a, uint16_t b) {
  return b < 16 ? (uint16_t)(a << b) : (uint16_t)0; }
static inline uint16_t kiln_shrl_u16(uint16_t a, uint16_t b) {
  return b < 16 ? (uint16_t)(a >> b) : (uint16_t)0; }
static inline uint16_t kiln_shra_u16(uint16_t a, uint16_t b) {
  return (uint16_t)((int16_t)a >> (b < 16 ? b : 16 - 1)); }

static inline int32_t kiln_div_i32(int32_t a, int32_t b) {
  return b == 0 ? (int32_t)-1 : (b == -1 ? (int32_t)((uint32_t)0 - (uint32_t)a) : (int32_t)(a / b)); }
static inline int32_t kiln_rem_i32(int32_t a, int32_t b) {
  return b == 0 ? a : (b == -1 ? (int32_t)0 : (int32_t)(a % b)); }
static inline int32_t kiln_shl_i32(int32_t a, int32_t b) {
  return (uint32_t)b < 32 ? (int32_t)((uint32_t)a << (uint32_t)b) : (int32_t)0; }
static inline int32_t kiln_shrl_i32(int32_t a, int32_t b) {
  return (uint32_t)b < 32 ? (int32_t)((uint32_t)a >> (uint32_t)b) : (int32_t)0; }
static inline int32_t kiln_shra_i32(int32_t a, int32_t b) {
  return (int32_t)((int32_t)a >> ((uint32_t)b < 32 ? (uint32_t)b : 32 - 1)); }

static inline uint32_t kiln_div_u32(uint32_t a, uint32_t b) { return b == 0 ? (uint32_t)~(uint32_t)0 : (uint32_t)(a / b); }
static inline uint32_t kiln_rem_u32(uint32_t a, uint32_t b) { return b == 0 ? a : (uint32_t)(a % b); }
static inline uint32_t kiln_shl_u32(uint32_t a, uint32_t b) {
  return b < 32 ? (uint32_t)(a << b) : (uint32_t)0; }
static inline uint32_t kiln_shrl_u32(uint32_t a, uint32_t b) {
  return b < 32 ? (uint32_t)(a >> b) : (uint32_t)0; }
static inline uint32_t kiln_shra_u32(uint32_t a, uint32_t b) {
  return (uint32_t)((int32_t)a >> (b < 32 ? b : 32 - 1)); }

static inline int64_t kiln_div_i64(int64_t a, int64_t b) {
  return b == 0 ? (int64_t)-1 : (b == -1 ? (int64_t)((uint64_t)0 - (uint64_t)a) : (int64_t)(a / b)); }
static inline int64_t kiln_rem_i64(int64_t a, int64_t b) {
  return b == 0 ? a : (b == -1 ? (int64_t)0 : (int64_t)(a % b)); }
static inline int64_t kiln_shl_i64(int64_t a, int64_t b) {
  return (uint64_t)b < 64 ? (int64_t)((uint64_t)a << (uint64_t)b) : (int64_t)0; }
static inline int64_t kiln_shrl_i64(int64_t a, int64_t b) {
  return (uint64_t)b < 64 ? (int64_t)((uint64_t)a >> (uint64_t)b) : (int64_t)0; }
static inline int64_t kiln_shra_i64(int64_t a, int64_t b) {
  return (int64_t)((int64_t)a >> ((uint64_t)b < 64 ? (uint64_t)b : 64 - 1)); }

static inline uint64_t kiln_div_u64(uint64_t a, uint64_t b) { return b == 0 ? (uint64_t)~(uint64_t)0 : (uint64_t)(a / b); }
static inline uint64_t kiln_rem_u64(uint64_t a, uint64_t b) { return b == 0 ? a : (uint64_t)(a % b); }
static inline uint64_t kiln_shl_u64(uint64_t a, uint64_t b) {
  return b < 64 ? (uint64_t)(a << b) : (uint64_t)0; }
static inline uint64_t kiln_shrl_u64(uint64_t a, uint64_t b) {
  return b < 64 ? (uint64_t)(a >> b) : (uint64_t)0; }
static inline uint64_t kiln_shra_u64(uint64_t a, uint64_t b) {
  return (uint64_t)((int64_t)a >> (b < 64 ? b : 64 - 1)); }
