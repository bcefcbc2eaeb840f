// Whether CUDA can run on this machine, and if not why: the one answer every GPU entry point gives (the CUDA backend's
// find_backend("cuda") and backend_unavailable_reason, the gpu tests' skip, the GPU benchmark, libcommon's rank
// binding used by cairn-train and cairn-sweep's NCCL backend, cairn-plan calibrate).
// Three states, because "no GPU here" and "a GPU whose CUDA fails" need different answers:
//   Absent: no driver (cudaDriverGetVersion gives 0), cudaErrorNoDevice, or zero devices: a machine without a GPU,
//           where the gpu tests skip (exit 77) and the tools refuse a GPU backend as not available;
//   Broken: a driver is there but CUDA fails (e.g. "CUDA driver version is insufficient for CUDA runtime version"
//           when the driver is older than the runtime cairn was built with): an error naming the CUDA error and both
//           versions, never a skip;
//   Usable: at least one device.
// classify_cuda_probe is pure and header-only (no CUDA headers), unit-tested with injected error codes
// (tests/kernels/kernels_cuda_probe_test.cpp); probe_cuda() asks the runtime once (kernels/cuda/cuda_probe.cpp, CUDA
// builds only: its own small library, so cairn-plan can link it without the kernels).
#pragma once
#include <string>

namespace cairn::kernels {

enum class CudaAvailability { Usable, Absent, Broken };

struct CudaProbe {
  CudaAvailability state = CudaAvailability::Absent;
  int devices = 0;          // cudaGetDeviceCount's count (0 when it failed)
  int driver_version = 0;   // cudaDriverGetVersion: the newest CUDA the driver supports, 1000*major + 10*minor; 0: none
  int runtime_version = 0;  // cudaRuntimeGetVersion: the runtime this program was built with
  std::string reason;       // empty when Usable; otherwise one clause for an error message
  bool usable() const { return state == CudaAvailability::Usable; }
};

// cudaError_t values the classification needs (kernels/cuda/cuda_probe.cpp checks them against the CUDA headers).
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorNoDevice = 100;

// "13.0" for 13000, "12.4" for 12040, "none" for 0 (no driver).
inline std::string cuda_version_text(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The state and reason from what the runtime said: cudaGetDeviceCount's error (a cudaError_t as int), its name and
// string (cudaGetErrorName / cudaGetErrorString), the device count, and the driver and runtime versions.
inline CudaProbe classify_cuda_probe(int count_error, const char* error_name, const char* error_text, int devices,
                                     int driver_version, int runtime_version) {
  CudaProbe p;
  p.driver_version = driver_version;
  p.runtime_version = runtime_version;
  p.devices = count_error == kCudaSuccess ? devices : 0;
  const std::string versions =
      "CUDA driver " + cuda_version_text(driver_version) + ", runtime " + cuda_version_text(runtime_version);
  std::string error = error_text && *error_text ? error_text : "unknown CUDA error";
  if (error_name && *error_name) error += std::string(" (") + error_name + ")";
  if (count_error == kCudaSuccess && devices > 0) {
    p.state = CudaAvailability::Usable;
  } else if (driver_version <= 0) {
    p.state = CudaAvailability::Absent;
    p.reason = "no usable CUDA device: no CUDA driver on this machine (" + versions +
               (count_error != kCudaSuccess ? "; cudaGetDeviceCount: " + error : std::string()) + ")";
  } else if (count_error == kCudaErrorNoDevice || count_error == kCudaSuccess) {
    p.state = CudaAvailability::Absent;
    p.reason = "no usable CUDA device: the driver sees no GPU (" + versions + "; check CUDA_VISIBLE_DEVICES" +
               (count_error != kCudaSuccess ? "; cudaGetDeviceCount: " + error : std::string()) + ")";
  } else {
    p.state = CudaAvailability::Broken;
    p.reason = "CUDA is installed but fails: cudaGetDeviceCount: " + error + " (" + versions + ")";
    if (runtime_version > driver_version)
      p.reason += "; the driver is older than the runtime this build uses: update the driver, or build cairn with a "
                  "CUDA toolkit no newer than " +
                  cuda_version_text(driver_version);
  }
  return p;
}

// The exit code of a gpu test program or GPU benchmark that cannot run: 0 when Usable (it runs), 77 when Absent (ctest:
// skipped), 1 when Broken (a failure: a GPU machine whose CUDA fails must not pass as "skipped").
inline int cuda_unusable_exit_code(const CudaProbe& p) {
  switch (p.state) {
    case CudaAvailability::Usable: return 0;
    case CudaAvailability::Absent: return 77;
    default: return 1;
  }
}

// What this machine's CUDA runtime says, asked once per process (later calls return the same answer). Defined in CUDA
// builds only.
const CudaProbe& probe_cuda();

}  // namespace cairn::kernels
