// A build without NCCL: GPU ranks reduce through host memory over the host world.
#include "dist/device_collectives.h"
#include "fp8lm/error.h"

namespace fp8lm {

bool nccl_built() {
  return false;
}

std::string nccl_version() {
  return "";
}

std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator&, int) {
  throw Error("this fp8lm was built without NCCL");
}

}  // namespace fp8lm
