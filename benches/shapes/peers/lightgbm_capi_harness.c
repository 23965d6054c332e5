/* Single-row latency of LightGBM's own C API (driven by benches/shapes/run.py).
 *
 *   lightgbm_capi_harness MODEL.txt ROWS.f32 N_FEATURES SECONDS N_CHECK
 *
 * Linked against lib_lightgbm.so from the lightgbm wheel (which ships no header: the four
 * prototypes below are copied from LightGBM's c_api.h). The fast single-row path:
 * LGBM_BoosterPredictForMatSingleRowFastInit once (normal prediction = probabilities, float32
 * rows, num_threads=1), then LGBM_BoosterPredictForMatSingleRowFast(row) per call. Timing
 * mirrors target/release/peer-native: a warm-up pass, then whole passes until SECONDS elapsed.
 *
 * Output: `pred <i> <value>...` for the first N_CHECK rows, then one JSON line. */
#include "row_file.h"

#include <stdint.h>

typedef void *BoosterHandle;
typedef void *FastConfigHandle;
int LGBM_BoosterCreateFromModelfile(const char *filename, int *out_num_iterations, BoosterHandle *out);
int LGBM_BoosterPredictForMatSingleRowFastInit(BoosterHandle handle, const int predict_type,
                                               const int start_iteration, const int num_iteration,
                                               const int data_type, const int32_t ncol,
                                               const char *parameter, FastConfigHandle *out_fastConfig);
int LGBM_BoosterPredictForMatSingleRowFast(FastConfigHandle fastConfig_handle, const void *data,
                                           int64_t *out_len, double *out_result);
const char *LGBM_GetLastError(void);
#define C_API_PREDICT_NORMAL 0
#define C_API_DTYPE_FLOAT32 0

#define CHECK(call)                                                      \
  if ((call) != 0) {                                                     \
    fprintf(stderr, "%s failed: %s\n", #call, LGBM_GetLastError());      \
    return 2;                                                            \
  }

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s MODEL.txt ROWS.f32 N_FEATURES SECONDS N_CHECK\n", argv[0]);
    return 2;
  }
  const int nf = atoi(argv[3]);
  const double seconds = atof(argv[4]);
  const int n_check = atoi(argv[5]);
  size_t n_rows;
  float *rows = read_rows_f32(argv[2], nf, &n_rows);

  BoosterHandle booster;
  int iterations;
  CHECK(LGBM_BoosterCreateFromModelfile(argv[1], &iterations, &booster));
  FastConfigHandle fast;
  CHECK(LGBM_BoosterPredictForMatSingleRowFastInit(booster, C_API_PREDICT_NORMAL, 0, -1, C_API_DTYPE_FLOAT32,
                                                   nf, "num_threads=1", &fast));
  double out[256];
  int64_t n_out = 0;
  for (int i = 0; i < n_check && (size_t)i < n_rows; ++i) {
    CHECK(LGBM_BoosterPredictForMatSingleRowFast(fast, rows + (size_t)i * nf, &n_out, out));
    printf("pred %d", i);
    for (int64_t k = 0; k < n_out; ++k) printf(" %.17g", out[k]);
    printf("\n");
  }
  double sink = 0;
  for (size_t i = 0; i < n_rows; ++i) { /* warm-up pass */
    LGBM_BoosterPredictForMatSingleRowFast(fast, rows + i * nf, &n_out, out);
    sink += out[0];
  }
  const double budget = seconds * 1e9, start = now_ns();
  double elapsed = 0;
  uint64_t calls = 0;
  while (elapsed < budget) {
    for (size_t i = 0; i < n_rows; ++i) {
      LGBM_BoosterPredictForMatSingleRowFast(fast, rows + i * nf, &n_out, out);
      sink += out[0];
    }
    calls += n_rows;
    elapsed = now_ns() - start;
  }
  printf("{\"peer\": \"lightgbm-capi\", \"ns_per_row\": %.1f, \"calls\": %llu, \"sink\": %.3f}\n",
         elapsed / (double)calls, (unsigned long long)calls, sink);
  return 0;
}
