/* Single-row latency of XGBoost's own C API (driven by benches/shapes/run.py).
 *
 *   xgboost_capi_harness MODEL.json ROWS.f32 N_FEATURES SECONDS N_CHECK FEATURE_TYPES
 *
 * Linked against libxgboost.so from the xgboost wheel (which ships no header: the prototypes
 * below are copied from XGBoost's c_api.h). XGBoosterPredictFromDense ("inplace prediction")
 * per row. Its inputs are JSON strings that it parses on every call: the row's
 * __array_interface__ and the prediction config. Made as cheap as the API allows: nthread=1 on
 * the booster, the smallest config, one proxy DMatrix created once (carrying the feature types,
 * e.g. "qqqc", for categorical models) instead of a new one per call, and every row's
 * array-interface string formatted once, up front (a real caller would format it per request).
 *
 * Output: `pred <i> <value>...` for the first N_CHECK rows, then one JSON line. */
#include "row_file.h"

#include <stdint.h>
#include <string.h>

typedef void *BoosterHandle;
typedef void *DMatrixHandle;
typedef uint64_t bst_ulong;
int XGBoosterCreate(const DMatrixHandle dmats[], bst_ulong len, BoosterHandle *out);
int XGBoosterLoadModel(BoosterHandle handle, const char *fname);
int XGBoosterSetParam(BoosterHandle handle, const char *name, const char *value);
int XGProxyDMatrixCreate(DMatrixHandle *out);
int XGDMatrixSetStrFeatureInfo(DMatrixHandle handle, const char *field, const char **features, const bst_ulong size);
int XGBoosterPredictFromDense(BoosterHandle handle, char const *values, char const *config, DMatrixHandle m,
                              bst_ulong const **out_shape, bst_ulong *out_dim, const float **out_result);
const char *XGBGetLastError(void);

#define CHECK(call)                                                  \
  if ((call) != 0) {                                                 \
    fprintf(stderr, "%s failed: %s\n", #call, XGBGetLastError());    \
    return 2;                                                        \
  }

static const char *CONFIG =
    "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
    "\"strict_shape\": false, \"missing\": NaN, \"cache_id\": 0}";

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s MODEL.json ROWS.f32 N_FEATURES SECONDS N_CHECK FEATURE_TYPES\n", argv[0]);
    return 2;
  }
  const int nf = atoi(argv[3]);
  const double seconds = atof(argv[4]);
  const int n_check = atoi(argv[5]);
  const char *types = argv[6];
  if ((int)strlen(types) != nf) {
    fprintf(stderr, "FEATURE_TYPES must have one letter (q or c) per feature\n");
    return 2;
  }
  size_t n_rows;
  float *rows = read_rows_f32(argv[2], nf, &n_rows);

  BoosterHandle booster;
  CHECK(XGBoosterCreate(NULL, 0, &booster));
  CHECK(XGBoosterLoadModel(booster, argv[1]));
  CHECK(XGBoosterSetParam(booster, "nthread", "1"));
  DMatrixHandle proxy;
  CHECK(XGProxyDMatrixCreate(&proxy));
  const char **type_names = malloc(sizeof(char *) * (size_t)nf);
  for (int j = 0; j < nf; ++j) type_names[j] = types[j] == 'c' ? "c" : "q";
  CHECK(XGDMatrixSetStrFeatureInfo(proxy, "feature_type", type_names, (bst_ulong)nf));

  enum { IFACE = 160 };
  char *iface = malloc(IFACE * n_rows);
  for (size_t i = 0; i < n_rows; ++i) {
    snprintf(iface + IFACE * i, IFACE,
             "{\"data\": [%llu, true], \"shape\": [1, %d], \"typestr\": \"<f4\", \"version\": 3}",
             (unsigned long long)(uintptr_t)(rows + i * nf), nf);
  }
  const bst_ulong *shape;
  bst_ulong dim;
  const float *out;
  for (int i = 0; i < n_check && (size_t)i < n_rows; ++i) {
    CHECK(XGBoosterPredictFromDense(booster, iface + IFACE * i, CONFIG, proxy, &shape, &dim, &out));
    bst_ulong n_out = 1;
    for (bst_ulong d = 1; d < dim; ++d) n_out *= shape[d];
    printf("pred %d", i);
    for (bst_ulong k = 0; k < n_out; ++k) printf(" %.9g", (double)out[k]);
    printf("\n");
  }
  double sink = 0;
  for (size_t i = 0; i < n_rows; ++i) { /* warm-up pass */
    XGBoosterPredictFromDense(booster, iface + IFACE * i, CONFIG, proxy, &shape, &dim, &out);
    sink += out[0];
  }
  const double budget = seconds * 1e9, start = now_ns();
  double elapsed = 0;
  uint64_t calls = 0;
  while (elapsed < budget) {
    for (size_t i = 0; i < n_rows; ++i) {
      XGBoosterPredictFromDense(booster, iface + IFACE * i, CONFIG, proxy, &shape, &dim, &out);
      sink += out[0];
    }
    calls += n_rows;
    elapsed = now_ns() - start;
  }
  printf("{\"peer\": \"xgboost-capi\", \"ns_per_row\": %.1f, \"calls\": %llu, \"sink\": %.3f}\n",
         elapsed / (double)calls, (unsigned long long)calls, sink);
  return 0;
}
