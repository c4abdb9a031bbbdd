/*
 * mpi-perf — the MPI peer of weft-perf: same options, same rows (perf/perf_driver.h).
 *
 * One C source built once per MPI found (Open MPI: mpicc.openmpi -> bin/mpi-perf-openmpi,
 * MPICH: mpicc.mpich -> bin/mpi-perf-mpich); each is run by its own launcher
 * (mpirun.openmpi --allow-run-as-root --oversubscribe -np N, mpiexec.mpich -n N).
 * Collectives: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall,
 * MPI_Bcast, MPI_Reduce, MPI_Sendrecv (ring). In place uses MPI_IN_PLACE.
 * MPI has no avg: it is MPI_SUM followed by a local division, inside the timed call.
 * MPI has no half/bfloat16 in C: those types are refused with a message.
 */
#include <mpi.h>

#include "perf_driver.h"

#ifndef MPI_PERF_FLAVOR
#define MPI_PERF_FLAVOR "mpi"
#endif

static MPI_Datatype mpi_type(perf_dtype_t t) {
  switch (t) {
    case PERF_INT8: return MPI_INT8_T;
    case PERF_UINT8: return MPI_UINT8_T;
    case PERF_INT32: return MPI_INT32_T;
    case PERF_UINT32: return MPI_UINT32_T;
    case PERF_INT64: return MPI_INT64_T;
    case PERF_UINT64: return MPI_UINT64_T;
    case PERF_FLOAT: return MPI_FLOAT;
    case PERF_DOUBLE: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(perf_op_t op) {
  switch (op) {
    case PERF_PROD: return MPI_PROD;
    case PERF_MAX: return MPI_MAX;
    case PERF_MIN: return MPI_MIN;
    default: return MPI_SUM; /* sum, avg (divided afterwards) */
  }
}

static void divide_by(perf_dtype_t t, void* buf, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case PERF_INT8: ((int8_t*)buf)[i] /= n; break;
      case PERF_UINT8: ((uint8_t*)buf)[i] /= n; break;
      case PERF_INT32: ((int32_t*)buf)[i] /= n; break;
      case PERF_UINT32: ((uint32_t*)buf)[i] /= n; break;
      case PERF_INT64: ((int64_t*)buf)[i] /= n; break;
      case PERF_UINT64: ((uint64_t*)buf)[i] /= n; break;
      case PERF_FLOAT: ((float*)buf)[i] /= n; break;
      case PERF_DOUBLE: ((double*)buf)[i] /= n; break;
      default: break;
    }
  }
}

static int mpi_check(int rc, char* err, size_t errlen, const char* what) {
  if (rc == MPI_SUCCESS) return 0;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  snprintf(err, errlen, "%s: %s", what, msg);
  return 1;
}

static int mpi_run(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv,
                   size_t count, perf_dtype_t dtype, perf_op_t op, int root, char* err,
                   size_t errlen) {
  MPI_Datatype t = mpi_type(dtype);
  MPI_Op o = mpi_op(op);
  int n = b->nranks, rank = b->rank, rc;
  int c = (int)count; /* counts stay far below 2^31 elements in these sweeps */
  size_t ts = perf_type_sizes[dtype];
  const void* s = (send == recv) ? MPI_IN_PLACE : send;
  switch (coll) {
    case PERF_ALLREDUCE:
      rc = MPI_Allreduce(s, recv, c, t, o, MPI_COMM_WORLD);
      if (op == PERF_AVG && rc == MPI_SUCCESS) divide_by(dtype, recv, count, n);
      return mpi_check(rc, err, errlen, "MPI_Allreduce");
    case PERF_ALLGATHER:
      /* in place: my block already sits at recv + rank*count */
      if ((const char*)send == (const char*)recv + (size_t)rank * count * ts) s = MPI_IN_PLACE;
      return mpi_check(MPI_Allgather(s, c, t, recv, c, t, MPI_COMM_WORLD), err, errlen,
                       "MPI_Allgather");
    case PERF_REDUCESCATTER:
      if ((const char*)recv == (const char*)send + (size_t)rank * count * ts) {
        /* MPI's in place puts my block at the start of the buffer: move it to my slot */
        rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, (void*)send, c, t, o, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS && rank != 0) memmove(recv, send, count * ts);
      } else {
        rc = MPI_Reduce_scatter_block(send, recv, c, t, o, MPI_COMM_WORLD);
      }
      if (op == PERF_AVG && rc == MPI_SUCCESS) divide_by(dtype, recv, count, n);
      return mpi_check(rc, err, errlen, "MPI_Reduce_scatter_block");
    case PERF_ALLTOALL:
      return mpi_check(MPI_Alltoall(s, c, t, recv, c, t, MPI_COMM_WORLD), err, errlen,
                       "MPI_Alltoall");
    case PERF_BROADCAST:
      if (rank == root && send != recv) memcpy(recv, send, count * ts);
      return mpi_check(MPI_Bcast(recv, c, t, root, MPI_COMM_WORLD), err, errlen, "MPI_Bcast");
    case PERF_REDUCE:
      /* MPI_IN_PLACE is only legal at the root; elsewhere recvbuf is not significant. */
      if (send == recv && rank != root) s = send;
      rc = MPI_Reduce(s, rank == root ? recv : NULL, c, t, o, root, MPI_COMM_WORLD);
      if (op == PERF_AVG && rc == MPI_SUCCESS && rank == root) divide_by(dtype, recv, count, n);
      return mpi_check(rc, err, errlen, "MPI_Reduce");
    case PERF_SENDRECV:
      return mpi_check(MPI_Sendrecv(send, c, t, (rank + 1) % n, 0, recv, c, t,
                                    (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                       err, errlen, "MPI_Sendrecv");
    default: snprintf(err, errlen, "unknown collective %d", (int)coll); return 1;
  }
}

static int mpi_barrier(perf_backend_t* b) { return MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS; }
static int mpi_max_double(perf_backend_t* b, double* v) {
  return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS;
}
static int mpi_sum_int64(perf_backend_t* b, int64_t* v) {
  return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS;
}
static const char* mpi_algo(perf_backend_t* b, perf_coll_t coll, size_t bytes) {
  static const char* names[PERF_NCOLL] = {"MPI_Allreduce", "MPI_Allgather",
                                          "MPI_Reduce_scatter_block", "MPI_Alltoall",
                                          "MPI_Bcast", "MPI_Reduce", "MPI_Sendrecv"};
  return names[coll];
}
static int g_root = 0;
/* MPICH 4.0.2 (Debian 12) crashes in MPI_Reduce(MPI_IN_PLACE) at a root other than 0 with a
 * non-power-of-two number of ranks and count >= ~595 floats (a 10-line reproducer does too):
 * that placement is reported N/A instead of taking the job down. */
static int mpi_inplace_ok(perf_backend_t* b, perf_coll_t coll) {
  if (coll == PERF_SENDRECV) return 0;
  if (coll == PERF_REDUCE && g_root != 0 && strcmp(b->name, "mpich") == 0) return 0;
  return 1;
}
static const char* mpi_unsupported(perf_backend_t* b, perf_coll_t coll, perf_dtype_t dtype,
                                   perf_op_t op) {
  if (mpi_type(dtype) == MPI_DATATYPE_NULL)
    return "-d half/bfloat16: MPI has no such C type (use float)";
  return NULL;
}

int main(int argc, char** argv) {
  perf_options_t o;
  int prc = perf_parse_options(argc, argv, &o);
  if (prc != 0) return prc > 0 ? 0 : 2;
  if (o.threads > 1) {
    fprintf(stderr, "%s: -t is not supported by the MPI peer (use -np)\n", argv[0]);
    return 2;
  }
  MPI_Init(&argc, &argv);
  perf_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = MPI_PERF_FLAVOR;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  /* Errors come back as codes (reported in the row) instead of aborting the job. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  char* nl = strchr(version, '\n');
  if (nl) *nl = 0;
  nl = strchr(version, ',');
  if (nl) *nl = 0;
  b.description = version;
  b.run = mpi_run;
  b.barrier = mpi_barrier;
  b.allreduce_max_double = mpi_max_double;
  b.allreduce_sum_int64 = mpi_sum_int64;
  b.algo_name = mpi_algo;
  b.unsupported = mpi_unsupported;
  b.inplace_ok = mpi_inplace_ok;
  g_root = o.root;
  int rc = perf_run(&b, &o);
  if (rc == 2) MPI_Abort(MPI_COMM_WORLD, 2); /* peers may be blocked in a collective */
  MPI_Finalize();
  return rc;
}
