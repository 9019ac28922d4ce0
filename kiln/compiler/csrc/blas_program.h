
typedef void (*kiln_gemm_f32_t)(int, int, int64_t, int64_t, int64_t, const float *, int64_t,
                                const float *, int64_t, float *, int64_t, float);
typedef void (*kiln_gemm_f64_t)(int, int, int64_t, int64_t, int64_t, const double *,
                                int64_t, const double *, int64_t, double *, int64_t, double);
extern __attribute__((visibility("hidden"))) kiln_gemm_f32_t kiln_gemm_f32;
extern __attribute__((visibility("hidden"))) kiln_gemm_f64_t kiln_gemm_f64;
/* @kiln-blas-definitions */
__attribute__((visibility("hidden"))) kiln_gemm_f32_t kiln_gemm_f32;
__attribute__((visibility("hidden"))) kiln_gemm_f64_t kiln_gemm_f64;
void kiln_blas_init(void *f32, void *f64) {
  kiln_gemm_f32 = (kiln_gemm_f32_t)f32;
  kiln_gemm_f64 = (kiln_gemm_f64_t)f64;
}
