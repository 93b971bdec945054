// The NCCL stand-in (include/nccl.h). Between the ranks of an mpirun launch (the build has
// MPI: CUDA_EMU_WITH_MPI) an all-reduce runs over MPI beside the host, as NCCL's runs on the
// GPU: started when called (MPI_Iallreduce), in flight on its stream until a peer joins and
// something waits for the stream or an event after it (runtime_state.h: PendingWork). So, as
// with NCCL, ncclCommDestroy waits for the communicator's collectives in flight (one a peer
// never joins never ends), and ncclCommAbort does not. In a world of one it is a copy. It is
// strict where NCCL would misbehave silently: buffers must be device memory, the unique id
// must be the one rank 0 made, and the world must be the launch's.
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "report.h"
#include "runtime_state.h"

#ifdef CUDA_EMU_WITH_MPI
#include <mpi.h>
#endif

#ifdef CUDA_EMU_WITH_MPI
// An all-reduce in flight: its MPI request, and the reduction it made (freed when it ends).
class InFlight final : public emu::detail::PendingWork {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Op op = MPI_OP_NULL;
  bool finished() override {
    if (!done_) {
      int flag = 0;
      MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
      if (flag) end();
    }
    return done_;
  }
  void finish() override {
    if (done_) return;
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    end();
  }
  // An aborted communicator's: nothing waits for it any more (its request is left to MPI, as
  // a nonblocking collective's may be neither freed nor cancelled).
  void abandon() { done_ = true; }

 private:
  void end() {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
    done_ = true;
  }
  bool done_ = false;
};
#endif

struct ncclComm {
  int rank = 0, size = 1;
#ifdef CUDA_EMU_WITH_MPI
  MPI_Comm mpi = MPI_COMM_NULL;
  std::vector<std::shared_ptr<InFlight>> in_flight;
#endif
};

namespace {

// What ncclGetUniqueId writes: a marker a forged or uninitialized id lacks.
constexpr char kIdMarker[] = "cuda-emu nccl unique id";

size_t element_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclFloat32:
      return 4;
  }
  return 0;
}

#ifdef CUDA_EMU_WITH_MPI
// NCCL's BF16 sum: in FP32, rounded to nearest even at each step (the project's rounding).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const fp8lm::bf16_t*>(in);
  auto* b = static_cast<fp8lm::bf16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = fp8lm::bf16_from_float(fp8lm::bf16_to_float(a[i]) + fp8lm::bf16_to_float(b[i]));
}
#endif

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kIdMarker, sizeof kIdMarker);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (std::memcmp(id.internal, kIdMarker, sizeof kIdMarker) != 0) {
    emu::detail::report("ncclCommInitRank: the unique id is not one ncclGetUniqueId made");
    return ncclInvalidArgument;
  }
  auto* c = new ncclComm{rank, nranks};
  if (nranks > 1) {
#ifdef CUDA_EMU_WITH_MPI
    int initialized = 0, size = 0, me = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
    }
    if (!initialized || size != nranks || me != rank) {
      emu::detail::report("ncclCommInitRank: rank %d of %d is not this mpirun launch's", rank,
                          nranks);
      delete c;
      return ncclInvalidUsage;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
#else
    emu::detail::report("ncclCommInitRank: %d ranks need MPI, and this emulator has none", nranks);
    delete c;
    return ncclInvalidUsage;
#endif
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
#ifdef CUDA_EMU_WITH_MPI
  for (const auto& f : comm->in_flight) f->finish();  // NCCL's finalize: they end first
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm->mpi != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm->mpi);
#endif
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
#ifdef CUDA_EMU_WITH_MPI
  for (const auto& f : comm->in_flight) f->abandon();
#endif
  delete comm;  // its MPI communicator is left to MPI_Finalize: the others may be in it
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!comm || !error) return ncclInvalidArgument;
  *error = ncclSuccess;  // MPI reports its failures where the collective ends
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * element_size(type);
  if (!comm || element_size(type) == 0) return ncclInvalidArgument;
  if (!emu::detail::is_valid_stream(stream)) {
    emu::detail::report("ncclAllReduce: not a stream");
    return ncclInvalidArgument;
  }
  if (emu::detail::refuse_in_capture("ncclAllReduce", stream, "NCCL in a graph is not emulated"))
    return ncclInvalidUsage;
  if (!emu::detail::is_device_range(send, bytes) || !emu::detail::is_device_range(recv, bytes)) {
    emu::detail::report("ncclAllReduce: a buffer of %zu bytes is not device memory", bytes);
    return ncclInvalidArgument;
  }
  if (comm->size == 1) {
    if (send != recv) std::memmove(recv, send, bytes);
    return ncclSuccess;
  }
#ifdef CUDA_EMU_WITH_MPI
  if (op != ncclSum || (type != ncclFloat32 && type != ncclBfloat16) || count > INT32_MAX) {
    emu::detail::report("ncclAllReduce: only FP32 and BF16 sums of up to 2^31 values emulated");
    return ncclInvalidUsage;
  }
  auto f = std::make_shared<InFlight>();
  if (type == ncclBfloat16) MPI_Op_create(&bf16_sum, 1, &f->op);
  const int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                                type == ncclFloat32 ? MPI_FLOAT : MPI_UINT16_T,
                                type == ncclFloat32 ? MPI_SUM : f->op, comm->mpi, &f->request);
  if (rc != MPI_SUCCESS) {
    if (f->op != MPI_OP_NULL) MPI_Op_free(&f->op);
    return ncclSystemError;
  }
  std::erase_if(comm->in_flight, [](const std::shared_ptr<InFlight>& g) { return g->finished(); });
  comm->in_flight.push_back(f);
  emu::detail::queue_pending(stream, f);
  return ncclSuccess;
#else
  (void)op;
  return ncclInvalidUsage;
#endif
}
