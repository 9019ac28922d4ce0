static inline float kiln_logistic_xla32(float x) { return ftz32(1.0f / (1.0f + xexp32(-x))); }
static inline double kiln_logistic_xla64(double x) { return ftz64(1.0 / (1.0 + xexp64(-x))); }
