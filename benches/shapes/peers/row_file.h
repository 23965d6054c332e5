/* The row file and the clock shared by the shape matrix's C harnesses (benches/shapes/peers).
 * ROWS.f32 is a raw little-endian float32 matrix, row-major, NaN = missing. */
#ifndef SHAPES_ROW_FILE_H
#define SHAPES_ROW_FILE_H
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The rows of `path` (n_features floats each); exits on error. */
static float *read_rows_f32(const char *path, int n_features, size_t *n_rows) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  *n_rows = (size_t)bytes / (sizeof(float) * (size_t)n_features);
  float *rows = malloc((size_t)bytes);
  if (!rows || fread(rows, 1, (size_t)bytes, f) != (size_t)bytes || *n_rows == 0) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  fclose(f);
  return rows;
}
#endif
