/*
 * perf_driver.h — the one sweep loop shared by weft-perf and its peers (gloo-perf, mpi-perf,
 * nccl-perf), so every backend prints exactly the same nccl-tests-shaped rows.
 *
 * Header-only C99 (mpi-perf is one C file, the others are C++). A backend fills a
 * perf_backend_t (run one collective, barrier, two tiny allreduces for the report, optional
 * device-memory hooks) and calls perf_main(); the driver owns option parsing, size stepping,
 * input generation, the exact #wrong check, timing, the table, and the --json/--csv files.
 *
 * Phases per size: (1) fill inputs, run once, check exactly, sum #wrong over ranks;
 * (2) warmup iterations; (3) barrier, time `iters` calls, average, max over ranks;
 * the same again in place. Rank 0 prints the row.
 *
 * Inputs are small integers chosen per (collective, op, dtype, nranks) so every result is an
 * exactly representable integer whatever the reduction order (fp16 exact to 2048, bf16 to 256,
 * int8 to 127): the check is equality, never a tolerance -- except with --compress (weft only),
 * where the backend sets `tolerance` to its codec's stated worst-case error and #wrong counts
 * values farther than that from the exact result (NaN always counts).
 *
 * The last column, wire, is the bytes each rank sends per call under a bandwidth-optimal
 * schedule: nccl-tests' bus factor x size, or what the backend reports (compressed payloads).
 */
#ifndef WEFT_PERF_DRIVER_H_
#define WEFT_PERF_DRIVER_H_

#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the timed calls carry. The check always runs on exact small integers; a compressed
 * call's time depends on its values (top-k's selection passes runs of equal values at read
 * speed, so small integers flatter it), so --compress times gradient-like values by default. */
typedef enum {
  PERF_VALUES_AUTO = 0, /* normal with --compress on a floating type, else exact */
  PERF_VALUES_EXACT,    /* the check's small integers (or zeros with -c 0), as before */
  PERF_VALUES_NORMAL    /* near-Gaussian per rank, sd 1, one in 1000 a 100x outlier */
} perf_values_t;

typedef enum {
  PERF_ALLREDUCE = 0,
  PERF_ALLGATHER,
  PERF_REDUCESCATTER,
  PERF_ALLTOALL,
  PERF_BROADCAST,
  PERF_REDUCE,
  PERF_SENDRECV,
  PERF_NCOLL
} perf_coll_t;

/* Same numbering as weftDataType_t / ncclDataType_t (weft-perf static_asserts it). */
typedef enum {
  PERF_INT8 = 0,
  PERF_UINT8 = 1,
  PERF_INT32 = 2,
  PERF_UINT32 = 3,
  PERF_INT64 = 4,
  PERF_UINT64 = 5,
  PERF_HALF = 6,
  PERF_FLOAT = 7,
  PERF_DOUBLE = 8,
  PERF_BF16 = 9,
  PERF_NTYPES = 10
} perf_dtype_t;

/* Same numbering as weftRedOp_t / ncclRedOp_t. */
typedef enum { PERF_SUM = 0, PERF_PROD, PERF_MAX, PERF_MIN, PERF_AVG, PERF_NOPS } perf_op_t;

static const char* const perf_coll_names[PERF_NCOLL] = {
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv"};
/* nccl-tests' type and op names, so rows compare textually. */
static const char* const perf_type_names[PERF_NTYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
static const size_t perf_type_sizes[PERF_NTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char* const perf_op_names[PERF_NOPS] = {"sum", "prod", "max", "min", "avg"};

typedef struct {
  size_t minbytes, maxbytes, stepbytes;
  double stepfactor;
  int iters, warmup, check, root, threads;
  perf_dtype_t dtype;
  perf_op_t op;
  perf_coll_t coll;
  const char* algo;       /* --algo: backend-specific algorithm choice (weft: WEFT_ALGO) */
  const char* json;       /* --json FILE */
  const char* csv;        /* --csv FILE */
  const char* label;      /* --label: backend label in the files (default: backend name) */
  double time_budget;     /* --time-budget SEC per size and placement: caps iters (0 = off) */
  const char* compress;   /* --compress CODEC: compressed collectives (weft only) */
  double tolerance;       /* set by a compressing backend: allowed |result - exact| (0 = exact) */
  char command[2048];     /* the command line, recorded in --json/--csv */
  int batches;            /* --batches B: median of B timed batches (0/1 = nccl-tests' mean) */
  perf_values_t values;   /* --values: what the timed calls carry (the check is always exact) */
  int huge_pages;         /* --pages huge: host buffers on transparent huge pages */
} perf_options_t;

struct perf_backend;
typedef struct perf_backend perf_backend_t;

struct perf_backend {
  const char* name; /* "weft", "gloo", "openmpi", "mpich", "nccl" */
  void* ctx;
  int rank, nranks;
  /* One collective; count is the API count (per rank, as NCCL). Returns 0, or non-zero with a
   * message in err. For sendrecv: send to rank+1, receive from rank-1 (ring), as nccl-tests. */
  int (*run)(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv, size_t count,
             perf_dtype_t dtype, perf_op_t op, int root, char* err, size_t errlen);
  int (*barrier)(perf_backend_t* b);
  int (*allreduce_max_double)(perf_backend_t* b, double* value);  /* in place */
  int (*allreduce_sum_int64)(perf_backend_t* b, int64_t* value);  /* in place */
  /* Optional (NULL = defaults). */
  const char* (*algo_name)(perf_backend_t* b, perf_coll_t coll, size_t bytes); /* "-" */
  /* Why (coll, dtype, op) cannot run here, or NULL when it can. */
  const char* (*unsupported)(perf_backend_t* b, perf_coll_t coll, perf_dtype_t dtype,
                             perf_op_t op);
  int (*inplace_ok)(perf_backend_t* b, perf_coll_t coll); /* default: all but sendrecv */
  void* (*alloc)(perf_backend_t* b, size_t bytes);        /* default: host malloc */
  void (*release)(perf_backend_t* b, void* ptr);
  int (*upload)(perf_backend_t* b, void* dst, const void* src, size_t bytes);
  int (*download)(perf_backend_t* b, void* dst, const void* src, size_t bytes);
  int (*sync)(perf_backend_t* b); /* waits for issued work; NULL: calls are blocking */
  const char* description;        /* one header line, e.g. "Gloo TCP on lo, ring" */
  /* Bytes this rank sends per call of count elements; NULL: bus factor x size. */
  size_t (*wire_bytes)(perf_backend_t* b, perf_coll_t coll, size_t count, perf_dtype_t dtype);
  int compresses; /* non-zero when the backend honours --compress */
};

/* ------------------------------------------------------------------ sizes and counts */

/* nccl-tests' getCollByteCount: from a size in bytes to (param count, send/recv elements). */
static void perf_counts(perf_coll_t coll, size_t size, size_t typesize, int nranks,
                        size_t* param, size_t* send_elems, size_t* recv_elems) {
  size_t count = size / typesize, n = (size_t)nranks;
  switch (coll) {
    case PERF_ALLGATHER:
      *param = count / n;
      *send_elems = *param;
      *recv_elems = *param * n;
      break;
    case PERF_REDUCESCATTER:
      *param = count / n;
      *send_elems = *param * n;
      *recv_elems = *param;
      break;
    case PERF_ALLTOALL:
      *param = count / n;
      *send_elems = *param * n;
      *recv_elems = *param * n;
      break;
    default:
      *param = count;
      *send_elems = count;
      *recv_elems = count;
      break;
  }
}

/* nccl-tests' bus bandwidth factors. */
static double perf_busbw_factor(perf_coll_t coll, int nranks) {
  double n = (double)nranks;
  switch (coll) {
    case PERF_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PERF_ALLGATHER:
    case PERF_REDUCESCATTER:
    case PERF_ALLTOALL: return (n - 1) / n;
    default: return 1.0;
  }
}

static int perf_coll_has_op(perf_coll_t c) {
  return c == PERF_ALLREDUCE || c == PERF_REDUCESCATTER || c == PERF_REDUCE;
}
static int perf_coll_has_root(perf_coll_t c) { return c == PERF_BROADCAST || c == PERF_REDUCE; }

/* ------------------------------------------------------------------ exact inputs */

/* Largest integer every value of the type holds exactly (results must stay below). */
static int64_t perf_exact_max(perf_dtype_t t) {
  switch (t) {
    case PERF_INT8: return 127;
    case PERF_UINT8: return 255;
    case PERF_HALF: return 2048;
    case PERF_BF16: return 256;
    default: return 1 << 20;
  }
}

static int64_t perf_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Input value of rank r at element j (j indexes the rank's whole send buffer). */
static int64_t perf_input(perf_coll_t coll, perf_op_t op, perf_dtype_t t, int r, int n,
                          size_t j) {
  int64_t B = perf_exact_max(t);
  uint64_t jj = (uint64_t)j;
  if (!perf_coll_has_op(coll)) return (int64_t)(((uint64_t)r * 7 + jj * 3 + 1) % 100);
  switch (op) {
    case PERF_SUM: {
      int64_t m = perf_min64(4, B / n); /* n ranks * m stays exact */
      return (int64_t)(((uint64_t)r * 3 + jj) % (uint64_t)(m + 1));
    }
    case PERF_AVG: {
      /* Multiples of n: the sum is n*k, so sum/n = k exactly. */
      int64_t m = perf_min64(4, B / ((int64_t)n * n));
      return (int64_t)n * (int64_t)(((uint64_t)r * 3 + jj) % (uint64_t)(m + 1));
    }
    case PERF_PROD:
      /* At most one rank contributes a 2 per element: product 1 or 2, position-dependent. */
      return ((jj + (uint64_t)r) % (uint64_t)(n + 1) == 0) ? 2 : 1;
    default: /* max, min */
      return (int64_t)(((uint64_t)r * 5 + jj * 3) % 11);
  }
}

static int64_t perf_reduce_expected(perf_coll_t coll, perf_op_t op, perf_dtype_t t, int n,
                                    size_t j) {
  int64_t acc = perf_input(coll, op, t, 0, n, j);
  for (int r = 1; r < n; ++r) {
    int64_t v = perf_input(coll, op, t, r, n, j);
    switch (op) {
      case PERF_SUM:
      case PERF_AVG: acc += v; break;
      case PERF_PROD: acc *= v; break;
      case PERF_MAX: acc = v > acc ? v : acc; break;
      case PERF_MIN: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  if (op == PERF_AVG) acc /= n;
  return acc;
}

static double perf_half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0, v;
  if (e == 0) {
    v = (double)m / 1024.0 / 16384.0; /* subnormal: m * 2^-24 */
  } else if (e == 31) {
    v = m ? (0.0 / 0.0) : (1.0 / 0.0);
  } else {
    v = (1.0 + (double)m / 1024.0);
    for (int k = e - 15; k > 0; --k) v *= 2.0;
    for (int k = e - 15; k < 0; ++k) v /= 2.0;
  }
  return s * v;
}

/* Float to IEEE half bits, rounding to nearest even (inputs well inside half's range). */
static uint16_t perf_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) { /* half's subnormals: |f| in units of 2^-24 */
    double a = (f < 0 ? -(double)f : (double)f) * 16777216.0;
    return (uint16_t)(sign | (uint16_t)(a + 0.5));
  }
  uint32_t m = x & 0x7fffff, h = ((uint32_t)e << 10) | (m >> 13), rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h; /* a carry steps the exponent */
  return (uint16_t)(sign | h);
}

/* Float to bfloat16 bits, rounding to nearest even (finite values). */
static uint16_t perf_float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

/* Stores f as element i of a floating buffer (the exact inputs' small integers convert
 * exactly: fp16 to 2048, bf16 to 256). */
static void perf_store_float(perf_dtype_t t, void* buf, size_t i, float f) {
  switch (t) {
    case PERF_HALF: ((uint16_t*)buf)[i] = perf_float_to_half(f); break;
    case PERF_FLOAT: ((float*)buf)[i] = f; break;
    case PERF_DOUBLE: ((double*)buf)[i] = f; break;
    case PERF_BF16: ((uint16_t*)buf)[i] = perf_float_to_bf16(f); break;
    default: break;
  }
}

static void perf_store(perf_dtype_t t, void* buf, size_t i, int64_t v) {
  switch (t) {
    case PERF_INT8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case PERF_UINT8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case PERF_INT32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case PERF_UINT32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case PERF_INT64: ((int64_t*)buf)[i] = v; break;
    case PERF_UINT64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case PERF_HALF:
    case PERF_FLOAT:
    case PERF_BF16: perf_store_float(t, buf, i, (float)v); break;
    case PERF_DOUBLE: ((double*)buf)[i] = (double)v; break;
    default: break;
  }
}

static double perf_load(perf_dtype_t t, const void* buf, size_t i) {
  switch (t) {
    case PERF_INT8: return ((const int8_t*)buf)[i];
    case PERF_UINT8: return ((const uint8_t*)buf)[i];
    case PERF_INT32: return ((const int32_t*)buf)[i];
    case PERF_UINT32: return ((const uint32_t*)buf)[i];
    case PERF_INT64: return (double)((const int64_t*)buf)[i];
    case PERF_UINT64: return (double)((const uint64_t*)buf)[i];
    case PERF_HALF: return perf_half_to_double(((const uint16_t*)buf)[i]);
    case PERF_FLOAT: return ((const float*)buf)[i];
    case PERF_DOUBLE: return ((const double*)buf)[i];
    case PERF_BF16: {
      uint32_t bits = (uint32_t)((const uint16_t*)buf)[i] << 16;
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    default: return 0;
  }
}

static uint64_t perf_mix64(uint64_t z) { /* splitmix64's finalizer */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Gradient-like value of rank r at element j, calibration's probe shape (topo/calibrate.cc):
 * near-Gaussian, sd 1, as the sum of four 16-bit uniforms; one in 1000, at hashed positions
 * (periodic ones would alias with top-k's evenly spaced samples), a 100x outlier. */
static float perf_normal_input(int r, size_t j) {
  uint64_t x = perf_mix64(((uint64_t)(r + 1) << 40) ^ (uint64_t)j);
  uint64_t sum = (x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48);
  float g = ((float)sum - 131070.0f) * (1.0f / 37837.0f);
  return perf_mix64(x) % 1000 == 0 ? 100.0f * g : g;
}

static int perf_is_floating(perf_dtype_t t) {
  return t == PERF_HALF || t == PERF_FLOAT || t == PERF_DOUBLE || t == PERF_BF16;
}

/* The values the timed calls carry (PERF_VALUES_AUTO resolved). */
static perf_values_t perf_timed_values(const perf_options_t* o) {
  if (o->values != PERF_VALUES_AUTO) return o->values;
  return o->compress && perf_is_floating(o->dtype) ? PERF_VALUES_NORMAL : PERF_VALUES_EXACT;
}

/* Fills `elems` gradient-like values of this rank at `buf` (host memory, a floating type). */
static void perf_fill_normal(perf_dtype_t t, int rank, void* buf, size_t elems) {
  for (size_t j = 0; j < elems; ++j) perf_store_float(t, buf, j, perf_normal_input(rank, j));
}

/* Fills this rank's input: `elems` elements at `buf` (host memory). */
static void perf_fill(const perf_options_t* o, int rank, int n, void* buf, size_t elems) {
  for (size_t j = 0; j < elems; ++j)
    perf_store(o->dtype, buf, j, perf_input(o->coll, o->op, o->dtype, rank, n, j));
}

/* Counts wrong elements of this rank's output (host memory) for param count `count`. */
static int64_t perf_check(const perf_options_t* o, int rank, int n, const void* out,
                          size_t count) {
  int64_t wrong = 0;
  perf_coll_t c = o->coll;
  perf_op_t op = o->op;
  perf_dtype_t t = o->dtype;
  size_t elems = (c == PERF_ALLGATHER || c == PERF_ALLTOALL) ? count * (size_t)n : count;
  if (c == PERF_REDUCE && rank != o->root) return 0; /* only root's output is defined */
  for (size_t i = 0; i < elems; ++i) {
    int64_t want;
    switch (c) {
      case PERF_ALLREDUCE:
      case PERF_REDUCE: want = perf_reduce_expected(c, op, t, n, i); break;
      case PERF_REDUCESCATTER:
        want = perf_reduce_expected(c, op, t, n, (size_t)rank * count + i);
        break;
      case PERF_BROADCAST: want = perf_input(c, op, t, o->root, n, i); break;
      case PERF_ALLGATHER: want = perf_input(c, op, t, (int)(i / count), n, i % count); break;
      case PERF_ALLTOALL:
        /* block p of my output is block `rank` of rank p's input */
        want = perf_input(c, op, t, (int)(i / count), n, (size_t)rank * count + i % count);
        break;
      case PERF_SENDRECV: want = perf_input(c, op, t, (rank + n - 1) % n, n, i); break;
      default: want = 0;
    }
    if (o->tolerance > 0) {
      double d = perf_load(t, out, i) - (double)want;
      if (d < 0) d = -d;
      if (!(d <= o->tolerance)) ++wrong; /* NaN counts as wrong */
    } else if (perf_load(t, out, i) != (double)want) {
      ++wrong;
    }
  }
  return wrong;
}

/* ------------------------------------------------------------------ options */

static size_t perf_parse_size(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end && *end) {
    switch (*end) {
      case 'K': case 'k': v *= 1024.0; break;
      case 'M': case 'm': v *= 1024.0 * 1024.0; break;
      case 'G': case 'g': v *= 1024.0 * 1024.0 * 1024.0; break;
      default: break;
    }
  }
  return (size_t)v;
}

static int perf_lookup(const char* s, const char* const* names, int n) {
  for (int i = 0; i < n; ++i)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static int perf_parse_dtype(const char* s) {
  int i = perf_lookup(s, perf_type_names, PERF_NTYPES);
  if (i >= 0) return i;
  if (!strcmp(s, "float16") || !strcmp(s, "fp16")) return PERF_HALF;
  if (!strcmp(s, "float32") || !strcmp(s, "fp32")) return PERF_FLOAT;
  if (!strcmp(s, "float64") || !strcmp(s, "fp64")) return PERF_DOUBLE;
  if (!strcmp(s, "bf16")) return PERF_BF16;
  if (!strcmp(s, "int")) return PERF_INT32;
  if (!strcmp(s, "char")) return PERF_INT8;
  return -1;
}

static void perf_usage(const char* prog, FILE* f) {
  fprintf(f,
          "usage: %s [options]\n"
          "nccl-tests' options and columns; one rank per process under a launcher (weftrun -n N,\n"
          "torchrun, srun, mpirun), or -t N ranks as threads of one process.\n"
          "\n"
          "sizes (SIZE takes K/M/G suffixes, powers of 1024; size = bytes as nccl-tests counts\n"
          "them: allgather/reducescatter/alltoall the whole buffer, so count = size/type/ranks):\n"
          "  -b,--minbytes SIZE      smallest size (default 32M)\n"
          "  -e,--maxbytes SIZE      largest size (default 32M)\n"
          "  -f,--stepfactor F       multiply the size by F each step (F > 1)\n"
          "  -i,--stepbytes SIZE     else add SIZE each step (default 1M)\n"
          "what to run:\n"
          "  -C,--collective C       allreduce allgather reducescatter alltoall broadcast reduce\n"
          "                          sendrecv (default allreduce; nccl-tests has one binary each)\n"
          "  -d,--datatype T         int8 uint8 int32 uint32 int64 uint64 half float double\n"
          "                          bfloat16 (also fp16 fp32 fp64 bf16 int char; default float)\n"
          "  -o,--op OP              sum prod max min avg (default sum)\n"
          "  -r,--root R             root of broadcast/reduce (default 0)\n"
          "  -t,--nthreads N         N ranks as threads of this process (default: 1 per process)\n"
          "  --algo SPEC             force the algorithm (weft: WEFT_ALGO syntax, e.g. ring or\n"
          "                          'allreduce:0-64K:oneshot,64K-inf:ring'; peers: their names)\n"
          "  --compress CODEC        weft only: the compressed collective (allreduce,\n"
          "                          reducescatter, allgather, alltoall; float or bfloat16; sum\n"
          "                          or avg) with CODEC as weftCompressionParse reads it: bf16\n"
          "                          fp16 fp8 fp8e5m2 int8 int4 sign1 topk[:RATIO], options\n"
          "                          ':block=N,hadamard,stochastic'. #wrong then counts values\n"
          "                          outside the codec's stated error bound\n"
          "  --values exact|normal   what the timed calls carry: the check's small integers, or\n"
          "                          gradient-like values (near-Gaussian per rank, 1 in 1000 a\n"
          "                          100x outlier; floating types). Default: normal with\n"
          "                          --compress (a codec's time depends on its values), else\n"
          "                          exact. The check always runs on the exact integers\n"
          "  --pages small|huge      host send/receive buffers on the allocator's pages (small,\n"
          "                          the default, as nccl-tests and PyTorch) or 2 MiB aligned\n"
          "                          and advised MADV_HUGEPAGE (huge: PyTorch's\n"
          "                          THP_MEM_ALLOC_ENABLE=1, or any buffer on a THP=always host);\n"
          "                          ignored for device and -R buffers\n"
          "measurement:\n"
          "  -n,--iters N            timed iterations per size and placement (default 20)\n"
          "  -w,--warmup_iters N     untimed iterations first (default 5)\n"
          "  -c,--check 0|1          check every result before timing (default 1)\n"
          "  --time-budget SEC       fewer iterations (at least 2) for sizes whose calls are\n"
          "                          slow: about SEC seconds per size and placement\n"
          "  --batches B             time B batches of iters/B calls and report the median\n"
          "                          batch's time per call (robust to a preempted batch on a\n"
          "                          shared machine); default 1: the mean over all iterations\n"
          "output (rank 0):\n"
          "  --json FILE             the rows as JSON (RESULTS.md and compare.py read these)\n"
          "  --csv FILE              the rows as CSV\n"
          "  --label NAME            backend name in those files (default: the backend's)\n"
          "  -h,--help               this text\n"
          "\n"
          "columns: size (B), count (elements per rank as the API takes it), type, redop, root;\n"
          "out-of-place and in-place: time (us, average over iters, max over ranks), algbw =\n"
          "size/time (GB/s), busbw = algbw x nccl-tests' bus factor (allreduce 2(n-1)/n,\n"
          "allgather/reducescatter/alltoall (n-1)/n, others 1), #wrong (values that differ from\n"
          "the exact result, summed over ranks; N/A when not checked); algo (what weft ran);\n"
          "wire (bytes each rank sends per call under a bandwidth-optimal schedule: bus factor x\n"
          "size, or the encoded bytes with --compress). Exit status: 0, 1 (wrong values), 2.\n"
          "nccl-tests options without a meaning here (host memory, no GPU per thread): -g, -m,\n"
          "-p, -z, -y, -G, -a, -T; they are rejected rather than ignored.\n",
          prog);
}

/* Returns 0 on success, 1 when the program should exit 0 (help), -1 on a bad option. */
static int perf_parse_options(int argc, char** argv, perf_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->minbytes = o->maxbytes = 32u << 20;
  o->stepbytes = 1u << 20;
  o->stepfactor = 1.0;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->dtype = PERF_FLOAT;
  o->op = PERF_SUM;
  o->coll = PERF_ALLREDUCE;
  size_t pos = 0;
  for (int i = 0; i < argc && pos + 2 < sizeof(o->command); ++i) {
    int w = snprintf(o->command + pos, sizeof(o->command) - pos, "%s%s", i ? " " : "", argv[i]);
    if (w < 0) break;
    pos += (size_t)w;
    if (pos >= sizeof(o->command)) pos = sizeof(o->command) - 1;
  }
  static const struct option longopts[] = {
      {"minbytes", required_argument, 0, 'b'},   {"maxbytes", required_argument, 0, 'e'},
      {"stepfactor", required_argument, 0, 'f'}, {"stepbytes", required_argument, 0, 'i'},
      {"iters", required_argument, 0, 'n'},      {"warmup_iters", required_argument, 0, 'w'},
      {"check", required_argument, 0, 'c'},      {"datatype", required_argument, 0, 'd'},
      {"op", required_argument, 0, 'o'},         {"root", required_argument, 0, 'r'},
      {"nthreads", required_argument, 0, 't'},   {"collective", required_argument, 0, 'C'},
      {"algo", required_argument, 0, 1},         {"json", required_argument, 0, 2},
      {"csv", required_argument, 0, 3},          {"label", required_argument, 0, 4},
      {"time-budget", required_argument, 0, 5},  {"help", no_argument, 0, 'h'},
      {"compress", required_argument, 0, 6},     {"batches", required_argument, 0, 7},
      {"values", required_argument, 0, 8},       {"pages", required_argument, 0, 9},
      {0, 0, 0, 0}};
  optind = 1;
  int c, v;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:t:C:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'b': o->minbytes = perf_parse_size(optarg); break;
      case 'e': o->maxbytes = perf_parse_size(optarg); break;
      case 'f': o->stepfactor = atof(optarg); break;
      case 'i': o->stepbytes = perf_parse_size(optarg); break;
      case 'n': o->iters = atoi(optarg); break;
      case 'w': o->warmup = atoi(optarg); break;
      case 'c': o->check = atoi(optarg); break;
      case 'r': o->root = atoi(optarg); break;
      case 't': o->threads = atoi(optarg); break;
      case 'd':
        if ((v = perf_parse_dtype(optarg)) < 0) {
          fprintf(stderr, "%s: -d %s: unknown datatype\n", argv[0], optarg);
          return -1;
        }
        o->dtype = (perf_dtype_t)v;
        break;
      case 'o':
        if ((v = perf_lookup(optarg, perf_op_names, PERF_NOPS)) < 0) {
          fprintf(stderr, "%s: -o %s: unknown op (sum prod max min avg)\n", argv[0], optarg);
          return -1;
        }
        o->op = (perf_op_t)v;
        break;
      case 'C':
        if ((v = perf_lookup(optarg, perf_coll_names, PERF_NCOLL)) < 0) {
          fprintf(stderr, "%s: -C %s: unknown collective\n", argv[0], optarg);
          return -1;
        }
        o->coll = (perf_coll_t)v;
        break;
      case 1: o->algo = optarg; break;
      case 2: o->json = optarg; break;
      case 3: o->csv = optarg; break;
      case 4: o->label = optarg; break;
      case 5: o->time_budget = atof(optarg); break;
      case 6: o->compress = optarg; break;
      case 7: o->batches = atoi(optarg); break;
      case 8:
        if (!strcmp(optarg, "exact")) o->values = PERF_VALUES_EXACT;
        else if (!strcmp(optarg, "normal")) o->values = PERF_VALUES_NORMAL;
        else {
          fprintf(stderr, "%s: --values %s: expected exact or normal\n", argv[0], optarg);
          return -1;
        }
        break;
      case 9:
        if (!strcmp(optarg, "small")) o->huge_pages = 0;
        else if (!strcmp(optarg, "huge")) o->huge_pages = 1;
        else {
          fprintf(stderr, "%s: --pages %s: expected small or huge\n", argv[0], optarg);
          return -1;
        }
        break;
      case 'h': perf_usage(argv[0], stdout); return 1;
      default: perf_usage(argv[0], stderr); return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
    return -1;
  }
  if (o->iters < 1 || o->warmup < 0 || o->minbytes > o->maxbytes ||
      (o->stepfactor <= 1.0 && o->stepbytes == 0) || o->threads < 0) {
    fprintf(stderr,
            "%s: bad sizes or counts: -b %zu -e %zu -f %g -i %zu -n %d -w %d -t %d\n", argv[0],
            o->minbytes, o->maxbytes, o->stepfactor, o->stepbytes, o->iters, o->warmup,
            o->threads);
    return -1;
  }
  if (o->values == PERF_VALUES_NORMAL && !perf_is_floating(o->dtype)) {
    fprintf(stderr, "%s: --values normal: needs a floating datatype (-d %s is not)\n", argv[0],
            perf_type_names[o->dtype]);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ timing and output */

static double perf_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  double time_us, algbw, busbw;
  int64_t wrong; /* -1: not checked; -2: not run (N/A) */
} perf_result_t;

typedef struct {
  size_t size, count;
  int root;
  perf_result_t oop, ip;
  char algo[64];
  int iters;
  size_t wire; /* bytes this rank sends per call */
} perf_row_t;

static void perf_print_time(FILE* f, const perf_result_t* r) {
  char t[32];
  if (r->wrong == -2) {
    fprintf(f, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  /* nccl-tests: fewer decimals as the time grows */
  if (r->time_us >= 10000.0)
    snprintf(t, sizeof t, "%7.0f", r->time_us);
  else if (r->time_us >= 100.0)
    snprintf(t, sizeof t, "%7.1f", r->time_us);
  else
    snprintf(t, sizeof t, "%7.2f", r->time_us);
  if (r->wrong >= 0)
    fprintf(f, "  %7s  %6.2f  %6.2f  %5g", t, r->algbw, r->busbw, (double)r->wrong);
  else
    fprintf(f, "  %7s  %6.2f  %6.2f  %5s", t, r->algbw, r->busbw, "N/A");
}

static void perf_json_result(FILE* f, const char* key, const perf_result_t* r) {
  if (r->wrong == -2) {
    fprintf(f, "\"%s\": null", key);
    return;
  }
  fprintf(f, "\"%s\": {\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %lld}",
          key, r->time_us, r->algbw, r->busbw, (long long)r->wrong);
}

static void perf_json_string(FILE* f, const char* s) {
  fputc('"', f);
  for (; s && *s; ++s) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static int perf_write_files(const perf_options_t* o, const perf_backend_t* b,
                            const perf_row_t* rows, int nrows, double avg_busbw,
                            int64_t wrong) {
  const char* label = o->label ? o->label : b->name;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  if (o->json) {
    FILE* f = fopen(o->json, "w");
    if (!f) {
      fprintf(stderr, "--json %s: cannot open for writing\n", o->json);
      return -1;
    }
    fprintf(f, "{\n  \"backend\": ");
    perf_json_string(f, label);
    fprintf(f, ",\n  \"collective\": \"%s\",\n  \"nranks\": %d,\n  \"type\": \"%s\",\n"
               "  \"redop\": \"%s\",\n  \"host\": ",
            perf_coll_names[o->coll], b->nranks, perf_type_names[o->dtype],
            perf_coll_has_op(o->coll) ? perf_op_names[o->op] : "none");
    perf_json_string(f, host);
    fprintf(f, ",\n  \"description\": ");
    perf_json_string(f, b->description ? b->description : "");
    fprintf(f, ",\n  \"command\": ");
    perf_json_string(f, o->command);
    fprintf(f, ",\n  \"compress\": ");
    perf_json_string(f, o->compress ? o->compress : "");
    fprintf(f, ",\n  \"values\": \"%s\"",
            perf_timed_values(o) == PERF_VALUES_NORMAL ? "normal" : "exact");
    fprintf(f, ",\n  \"pages\": \"%s\"", o->huge_pages ? "huge" : "small");
    fprintf(f, ",\n  \"rows\": [");
    for (int i = 0; i < nrows; ++i) {
      const perf_row_t* r = &rows[i];
      fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"root\": %d, \"iters\": %d, ",
              i ? "," : "", r->size, r->count, r->root, r->iters);
      perf_json_result(f, "out_of_place", &r->oop);
      fprintf(f, ", ");
      perf_json_result(f, "in_place", &r->ip);
      fprintf(f, ", \"algo\": ");
      perf_json_string(f, r->algo);
      fprintf(f, ", \"wire_bytes\": %zu}", r->wire);
    }
    fprintf(f, "\n  ],\n  \"avg_busbw\": %.4f,\n  \"wrong\": %lld\n}\n", avg_busbw,
            (long long)wrong);
    fclose(f);
  }
  if (o->csv) {
    FILE* f = fopen(o->csv, "w");
    if (!f) {
      fprintf(stderr, "--csv %s: cannot open for writing\n", o->csv);
      return -1;
    }
    fprintf(f, "backend,collective,nranks,size,count,type,redop,root,oop_time_us,oop_algbw,"
               "oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong,algo,wire_bytes\n");
    for (int i = 0; i < nrows; ++i) {
      const perf_row_t* r = &rows[i];
      fprintf(f, "%s,%s,%d,%zu,%zu,%s,%s,%d,%.3f,%.4f,%.4f,%lld,", label,
              perf_coll_names[o->coll], b->nranks, r->size, r->count, perf_type_names[o->dtype],
              perf_coll_has_op(o->coll) ? perf_op_names[o->op] : "none", r->root,
              r->oop.time_us, r->oop.algbw, r->oop.busbw, (long long)r->oop.wrong);
      if (r->ip.wrong == -2)
        fprintf(f, ",,,,%s,%zu\n", r->algo, r->wire);
      else
        fprintf(f, "%.3f,%.4f,%.4f,%lld,%s,%zu\n", r->ip.time_us, r->ip.algbw, r->ip.busbw,
                (long long)r->ip.wrong, r->algo, r->wire);
    }
    fclose(f);
  }
  return 0;
}

/* ------------------------------------------------------------------ the sweep */

typedef struct {
  void* send; /* device or host, as the backend allocates */
  void* recv;
  void* host; /* staging for fill/check */
  size_t bytes;
} perf_buffers_t;

#define PERF_HUGE_PAGE ((size_t)2 << 20)
/* Host buffers: 64-byte aligned, as PyTorch's CPU allocator aligns tensors (malloc's large
 * blocks start 16 bytes into a page, and a same-host peer's single-copy read of such a buffer
 * ran ~25% slower in the kernel's copy: 2x4 int8 93-98 against 88-92 ms), on the allocator's
 * 4 KiB pages unless the host's THP policy is "always"; or with --pages huge 2 MiB aligned and
 * advised MADV_HUGEPAGE before their first touch (what PyTorch's CPU allocator does under
 * THP_MEM_ALLOC_ENABLE=1, and any process gets under THP "always"). */
static void* perf_alloc(perf_backend_t* b, size_t bytes, int huge) {
  if (bytes == 0) bytes = 1;
  if (b->alloc) return b->alloc(b, bytes);
  if (!huge) {
    void* p = NULL;
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
  }
  size_t rounded = (bytes + PERF_HUGE_PAGE - 1) / PERF_HUGE_PAGE * PERF_HUGE_PAGE;
  void* p = aligned_alloc(PERF_HUGE_PAGE, rounded);
  if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: small pages still work */
  return p;
}
static void perf_release(perf_backend_t* b, void* p) {
  if (!p) return;
  if (b->release)
    b->release(b, p);
  else
    free(p);
}
static int perf_copy_in(perf_backend_t* b, void* dst, const void* src, size_t n) {
  if (b->upload) return b->upload(b, dst, src, n);
  memcpy(dst, src, n);
  return 0;
}
static int perf_copy_out(perf_backend_t* b, void* dst, const void* src, size_t n) {
  if (b->download) return b->download(b, dst, src, n);
  memcpy(dst, src, n);
  return 0;
}

/* Runs one call, then syncs. 0 or an error already printed to stderr. */
static int perf_call(perf_backend_t* b, const perf_options_t* o, const void* s, void* r,
                     size_t count, int sync) {
  char err[512];
  err[0] = '\0';  /* not `= ""`: that zeroes all 512 bytes on every timed call */
  int rc = b->run(b, o->coll, s, r, count, o->dtype, o->op, o->root, err, sizeof err);
  if (rc == 0 && sync && b->sync) rc = b->sync(b);
  if (rc != 0)
    fprintf(stderr, "[%s rank %d] %s count %zu %s failed: %s\n", b->name, b->rank,
            perf_coll_names[o->coll], count, perf_type_names[o->dtype], err[0] ? err : "error");
  return rc;
}

static int perf_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* `iters` timed calls; *sec = seconds per call: the mean, or with --batches B the median over
 * B batches of iters/B calls (a batch that a preemption of this machine hit is an outlier the
 * median ignores; every backend is timed the same way). */
static int perf_timed_calls(perf_backend_t* b, const perf_options_t* o, const void* s, void* r,
                            size_t count, int iters, double* sec) {
  int nb = o->batches > 1 ? o->batches : 1;
  if (nb > iters) nb = iters;
  double per[64];
  if (nb > 64) nb = 64;
  const int each = iters / nb;
  for (int k = 0; k < nb; ++k) {
    double t0 = perf_now();
    for (int i = 0; i < each; ++i)
      if (perf_call(b, o, s, r, count, 0)) return -1;
    if (b->sync && b->sync(b)) return -1;
    per[k] = (perf_now() - t0) / each;
  }
  qsort(per, (size_t)nb, sizeof per[0], perf_cmp_double);
  *sec = per[nb / 2];
  return 0;
}

/* One placement (in place or not) of one size: check, warm up, time. */
static int perf_measure(perf_backend_t* b, const perf_options_t* o, perf_buffers_t* bufs,
                        size_t count, size_t send_elems, size_t recv_elems, int inplace,
                        size_t size, perf_result_t* res) {
  size_t ts = perf_type_sizes[o->dtype];
  int n = b->nranks, rank = b->rank;
  const void* sendp = bufs->send;
  void* recvp = bufs->recv;
  void* outp = bufs->recv;
  size_t in_offset = 0; /* where this rank's input sits in the in-place buffer (elements) */
  if (inplace) {
    switch (o->coll) {
      case PERF_ALLGATHER: /* my contribution already sits at my slot of the output */
        in_offset = (size_t)rank * count;
        sendp = (char*)bufs->recv + in_offset * ts;
        recvp = bufs->recv;
        outp = bufs->recv;
        break;
      case PERF_REDUCESCATTER: /* my result lands at my slot of the input */
        sendp = bufs->recv;
        recvp = (char*)bufs->recv + (size_t)rank * count * ts;
        outp = recvp;
        break;
      default:
        sendp = bufs->recv;
        recvp = bufs->recv;
        outp = bufs->recv;
        break;
    }
  }
  res->wrong = -1;
  if (o->check) {
    /* Poison the output first (0xff bytes: NaN, or an integer no check expects), so a call
     * that writes nothing cannot pass on values left by the previous size. */
    size_t span = (send_elems > recv_elems ? send_elems : recv_elems) * ts;
    memset(bufs->host, 0xff, span);
    if (perf_copy_in(b, bufs->recv, bufs->host, span)) return -1;
    perf_fill(o, rank, n, bufs->host, send_elems);
    if (perf_copy_in(b, (char*)(inplace ? bufs->recv : bufs->send) + in_offset * ts, bufs->host,
                     send_elems * ts))
      return -1;
    if (perf_call(b, o, sendp, recvp, count, 1)) return -1;
    size_t out_elems = (o->coll == PERF_REDUCESCATTER) ? count : recv_elems;
    if (perf_copy_out(b, bufs->host, outp, out_elems * ts)) return -1;
    int64_t wrong = perf_check(o, rank, n, bufs->host, count);
    if (b->allreduce_sum_int64(b, &wrong)) return -1;
    res->wrong = wrong;
  }
  if (perf_timed_values(o) == PERF_VALUES_NORMAL) {
    /* The timed calls' values replace the check's (an in-place call has overwritten them). */
    perf_fill_normal(o->dtype, rank, bufs->host, send_elems);
    if (perf_copy_in(b, (char*)(inplace ? bufs->recv : bufs->send) + in_offset * ts, bufs->host,
                     send_elems * ts))
      return -1;
  }
  int iters = o->iters;
  for (int i = 0; i < o->warmup; ++i)
    if (perf_call(b, o, sendp, recvp, count, 0)) return -1;
  if (b->sync && b->sync(b)) return -1;
  if (o->time_budget > 0) {
    /* One probe call, max over ranks so every rank settles on the same iteration count. */
    double t0 = perf_now();
    if (perf_call(b, o, sendp, recvp, count, 1)) return -1;
    double probe = perf_now() - t0;
    if (b->allreduce_max_double(b, &probe)) return -1;
    if (probe * iters > o->time_budget) {
      iters = (int)(o->time_budget / (probe > 1e-9 ? probe : 1e-9));
      if (iters < 2) iters = 2;
    }
  }
  if (b->barrier(b)) return -1;
  double sec = 0;
  if (perf_timed_calls(b, o, sendp, recvp, count, iters, &sec)) return -1;
  if (b->allreduce_max_double(b, &sec)) return -1;
  res->time_us = sec * 1e6;
  res->algbw = sec > 0 ? (double)size / 1e9 / sec : 0.0;
  res->busbw = res->algbw * perf_busbw_factor(o->coll, n);
  return iters;
}

static const char* perf_default_algo(perf_backend_t* b, perf_coll_t c, size_t bytes) {
  (void)b; (void)c; (void)bytes;
  return "-";
}

/* The sweep. Returns the process exit code: 0, 1 (wrong values), 2 (an error). */
static int perf_run(perf_backend_t* b, const perf_options_t* o) {
  int rank = b->rank, n = b->nranks;
  FILE* out = stdout;
  size_t ts = perf_type_sizes[o->dtype];
  const char* why = b->unsupported ? b->unsupported(b, o->coll, o->dtype, o->op) : NULL;
  if (why) {
    if (rank == 0) fprintf(stderr, "%s: %s\n", b->name, why);
    return 2;
  }
  if (o->compress && !b->compresses) {
    if (rank == 0) fprintf(stderr, "%s: --compress is not supported by this backend\n", b->name);
    return 2;
  }
  if (perf_coll_has_root(o->coll) && (o->root < 0 || o->root >= n)) {
    if (rank == 0) fprintf(stderr, "%s: -r %d: root out of range [0, %d)\n", b->name, o->root, n);
    return 2;
  }
  int ip_ok = b->inplace_ok ? b->inplace_ok(b, o->coll) : (o->coll != PERF_SENDRECV);
  if (rank == 0) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    fprintf(out,
            "# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d "
            "iters: %d agg iters: 1 validation: %d graph: 0\n",
            o->threads > 0 ? o->threads : 1, o->minbytes, o->maxbytes,
            o->stepfactor > 1 ? o->stepfactor : (double)o->stepbytes,
            o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
    fprintf(out, "#\n# Backend %s: %s\n", b->name, b->description ? b->description : "");
    fprintf(out, "# Collective %s, %d ranks, rank 0 pid %d on %s%s\n",
            perf_coll_names[o->coll], n, (int)getpid(), host,
            o->time_budget > 0 ? " (--time-budget caps iterations of slow sizes)" : "");
    if (o->compress)
      fprintf(out, "# Compression %s: #wrong counts values more than %g from the exact result\n",
              o->compress, o->tolerance);
    else if (o->tolerance > 0) /* the backend's own reason (weft: WEFT_COMPRESSION) */
      fprintf(out, "# Lossy calls possible (job-wide compression): #wrong counts values more than "
                   "%g from the exact result\n", o->tolerance);
    if (perf_timed_values(o) == PERF_VALUES_NORMAL)
      fprintf(out, "# Timed on gradient-like values (--values normal); checked on exact integers\n");
    fprintf(out, "#\n");
    fprintf(out, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                 "in-place          \n", "", "", "", "", "");
    fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %s  %s\n",
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong", "algo", "wire");
    fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %4s  %s\n",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
            "(GB/s)", "", "", "(B)");
    fflush(out);
  }
  /* Buffers sized for the largest step. */
  size_t pmax, smax, rmax;
  perf_counts(o->coll, o->maxbytes, ts, n, &pmax, &smax, &rmax);
  perf_buffers_t bufs;
  bufs.bytes = (smax > rmax ? smax : rmax) * ts;
  bufs.send = perf_alloc(b, bufs.bytes, o->huge_pages);
  bufs.recv = perf_alloc(b, bufs.bytes, o->huge_pages);
  bufs.host = malloc(bufs.bytes ? bufs.bytes : 1);
  if (!bufs.send || !bufs.recv || !bufs.host) {
    fprintf(stderr, "[%s rank %d] cannot allocate 3 x %zu bytes\n", b->name, rank, bufs.bytes);
    return 2;
  }
  memset(bufs.host, 0, bufs.bytes);
  perf_copy_in(b, bufs.send, bufs.host, bufs.bytes);
  perf_copy_in(b, bufs.recv, bufs.host, bufs.bytes);

  perf_row_t* rows = NULL;
  int nrows = 0, cap = 0, rc = 0;
  double bw_sum = 0;
  int bw_count = 0;
  int64_t wrong_total = 0;
  for (size_t size = o->minbytes; size <= o->maxbytes;
       size = (o->stepfactor > 1) ? (size_t)((double)size * o->stepfactor)
                                  : size + o->stepbytes) {
    size_t count, se, re;
    perf_counts(o->coll, size, ts, n, &count, &se, &re);
    size_t shown = (se > re ? se : re) * ts; /* nccl-tests: max(sendBytes, recvBytes) */
    perf_row_t row;
    memset(&row, 0, sizeof row);
    row.size = shown;
    row.count = count;
    row.root = perf_coll_has_root(o->coll) ? o->root : -1;
    int it = perf_measure(b, o, &bufs, count, se, re, 0, shown, &row.oop);
    if (it < 0) { rc = 2; break; }
    row.iters = it;
    if (ip_ok) {
      if (perf_measure(b, o, &bufs, count, se, re, 1, shown, &row.ip) < 0) { rc = 2; break; }
    } else {
      row.ip.wrong = -2;
    }
    const char* algo = (b->algo_name ? b->algo_name : perf_default_algo)(b, o->coll, shown);
    snprintf(row.algo, sizeof row.algo, "%s", algo ? algo : "-");
    row.wire = b->wire_bytes ? b->wire_bytes(b, o->coll, count, o->dtype)
                             : (size_t)((double)shown * perf_busbw_factor(o->coll, n));
    bw_sum += row.oop.busbw;
    ++bw_count;
    if (row.oop.wrong > 0) wrong_total += row.oop.wrong;
    if (ip_ok) {
      bw_sum += row.ip.busbw;
      ++bw_count;
      if (row.ip.wrong > 0) wrong_total += row.ip.wrong;
    }
    if (rank == 0) {
      char rootname[16];
      snprintf(rootname, sizeof rootname, "%6i", row.root);
      fprintf(out, "%12zu  %12zu  %8s  %6s  %6s", row.size, row.count,
              perf_type_names[o->dtype],
              perf_coll_has_op(o->coll) ? perf_op_names[o->op] : "none", rootname);
      perf_print_time(out, &row.oop);
      perf_print_time(out, &row.ip);
      fprintf(out, "  %s  %zu\n", row.algo, row.wire);
      fflush(out);
      if (nrows == cap) {
        cap = cap ? cap * 2 : 32;
        rows = (perf_row_t*)realloc(rows, (size_t)cap * sizeof *rows);
        if (!rows) { rc = 2; break; }
      }
      rows[nrows++] = row;
    }
    if (size == 0 || (o->stepfactor > 1 && (size_t)((double)size * o->stepfactor) == size))
      break; /* a step that would not advance */
  }
  double avg = bw_count ? bw_sum / bw_count : 0.0;
  if (rank == 0 && rc != 2) {
    fprintf(out, "# Out of bounds values : %lld %s\n", (long long)wrong_total,
            wrong_total ? "FAILED" : "OK");
    fprintf(out, "# Avg bus bandwidth    : %g \n", avg);
    fprintf(out, "#\n");
    fflush(out);
    if (perf_write_files(o, b, rows, nrows, avg, wrong_total)) rc = 2;
  }
  free(rows);
  perf_release(b, bufs.send);
  perf_release(b, bufs.recv);
  free(bufs.host);
  if (rc == 0 && wrong_total) rc = 1;
  return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* WEFT_PERF_DRIVER_H_ */
