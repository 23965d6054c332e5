/* Single-row latency harness for tl2cgen-generated C (driven by benches/peers/run.py).
 *
 *   tl2cgen_harness ROWS.f32 N_FEATURES SECONDS [N_CHECK]
 *
 * ROWS.f32 is a raw little-endian float32 matrix, row-major, NaN = missing (run.py writes it from
 * models/reference/rows.csv). The rows are converted once, up front, to tl2cgen's `union Entry`
 * arrays (`missing = -1` for NaN), so the timed loop contains nothing but one `predict()` call per
 * row -- the most favourable setup for the peer. Timing mirrors target/release/peer-native: one
 * warm-up pass over all rows, then whole passes until SECONDS have elapsed; mean ns per call.
 *
 * Output (stdout):
 *   pred <i> <value>...   for the first N_CHECK rows: every output (MAX_N_CLASS * N_TARGET values;
 *                         probabilities, for the drivers' sanity checks)
 *   {"peer": "tl2cgen", "ns_per_row": ..., "calls": ...}
 *
 * Build (run.py does this; the generated header decides the value types):
 *   gcc -O3 -march=native -DTL_RESULT_T=float -I<generated dir> tl2cgen_harness.c main.o -lm
 */
#define _POSIX_C_SOURCE 199309L
#include "header.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef TL_RESULT_T
#error "define TL_RESULT_T (float or double, the generated predict()'s result type)"
#endif

typedef __typeof__(((union Entry *)0)->fvalue) fvalue_t;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ROWS.f32 N_FEATURES SECONDS [N_CHECK]\n", argv[0]);
    return 2;
  }
  const int nf = atoi(argv[2]);
  const double seconds = atof(argv[3]);
  const int n_check = argc > 4 ? atoi(argv[4]) : 0;
  if (nf != get_num_feature()) {
    fprintf(stderr, "rows have %d features, model expects %d\n", nf, (int)get_num_feature());
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  const size_t n_rows = (size_t)bytes / (sizeof(float) * (size_t)nf);
  float *raw = malloc((size_t)bytes);
  if (!raw || fread(raw, 1, (size_t)bytes, f) != (size_t)bytes || n_rows == 0) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  fclose(f);

  union Entry *rows = malloc(sizeof(union Entry) * n_rows * (size_t)nf);
  for (size_t i = 0; i < n_rows * (size_t)nf; ++i) {
    if (isnan(raw[i])) {
      rows[i].missing = -1;
    } else {
      rows[i].fvalue = (fvalue_t)raw[i];
    }
  }
  free(raw);

  enum { N_OUT = MAX_N_CLASS * N_TARGET };
  TL_RESULT_T out[N_OUT];
  for (int i = 0; i < n_check && (size_t)i < n_rows; ++i) {
    for (int k = 0; k < N_OUT; ++k) out[k] = 0;
    predict(rows + (size_t)i * nf, 0, out);
    printf("pred %d", i);
    for (int k = 0; k < N_OUT; ++k) printf(" %.9g", (double)out[k]);
    printf("\n");
  }

  double sink = 0;
  for (size_t i = 0; i < n_rows; ++i) { /* warm-up pass */
    for (int k = 0; k < N_OUT; ++k) out[k] = 0;
    predict(rows + i * nf, 0, out);
    sink += out[0];
  }
  const double budget = seconds * 1e9;
  const double start = now_ns();
  double elapsed = 0;
  uint64_t calls = 0;
  while (elapsed < budget) {
    for (size_t i = 0; i < n_rows; ++i) {
      /* predict() accumulates into result[]; tl2cgen's own predictor zeroes it too */
      for (int k = 0; k < N_OUT; ++k) out[k] = 0;
      predict(rows + i * nf, 0, out);
      sink += out[0];
    }
    calls += n_rows;
    elapsed = now_ns() - start;
  }
  printf("{\"peer\": \"tl2cgen\", \"ns_per_row\": %.1f, \"calls\": %llu, \"sink\": %.3f}\n",
         elapsed / (double)calls, (unsigned long long)calls, sink);
  free(rows);
  return 0;
}
