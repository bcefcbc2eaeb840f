// probe_cuda() of cairn/kernels/cuda_probe.h: asks the CUDA runtime once whether a device is usable (host C++, its own
// small library so cairn-plan can link it without the kernels; the program links the runtime, shared or static).
#include "cairn/kernels/cuda_probe.h"

#include <cuda_runtime.h>

namespace cairn::kernels {

static_assert(kCudaSuccess == cudaSuccess && kCudaErrorNoDevice == cudaErrorNoDevice,
              "cairn/kernels/cuda_probe.h: cudaError_t values changed");

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = [] {
    int devices = 0, driver = 0, runtime = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    cudaGetLastError();  // neither "no driver" nor "no device" is sticky: leave no error for the next check
    return classify_cuda_probe(err, cudaGetErrorName(err), cudaGetErrorString(err), devices, driver, runtime);
  }();
  return probe;
}

}  // namespace cairn::kernels
