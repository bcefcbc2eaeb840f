// The one answer to "can CUDA run here, and why not" (cairn/kernels/cuda_probe.h): the classification of what the
// runtime says, with injected error codes (cudaError_t values as the CUDA 12/13 headers define them), on any machine;
// in CUDA builds also the real probe of this machine, which must agree with its own driver version: a machine without a
// driver (cudaDriverGetVersion gives 0, like CI here) is Absent, so the gpu tests skip there, while a driver that is
// present but fails is Broken, a failure.
#define BOOST_TEST_MODULE kernels_cuda_probe
#include <boost/test/unit_test.hpp>
#include <string>

#include "cairn/kernels/cuda_probe.h"

using namespace cairn::kernels;

namespace {
constexpr int kInsufficientDriver = 35;  // cudaErrorInsufficientDriver
constexpr int kInitializationError = 3;  // cudaErrorInitializationError
constexpr const char* kInsufficientText = "CUDA driver version is insufficient for CUDA runtime version";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

BOOST_AUTO_TEST_CASE(versions_as_text) {
  BOOST_TEST(cuda_version_text(13000) == "13.0");
  BOOST_TEST(cuda_version_text(12040) == "12.4");
  BOOST_TEST(cuda_version_text(12090) == "12.9");
  BOOST_TEST(cuda_version_text(0) == "none");
}

BOOST_AUTO_TEST_CASE(usable_with_a_device) {
  const CudaProbe p = classify_cuda_probe(kCudaSuccess, "cudaSuccess", "no error", 8, 13000, 13000);
  BOOST_TEST(p.usable());
  BOOST_TEST(p.devices == 8);
  BOOST_TEST(p.reason.empty());
  BOOST_TEST(cuda_unusable_exit_code(p) == 0);
}

// The machine of this CI: no libcuda, so the runtime says "insufficient driver" and the driver version is 0: absent.
BOOST_AUTO_TEST_CASE(no_driver_is_absent_and_skips) {
  const CudaProbe p =
      classify_cuda_probe(kInsufficientDriver, "cudaErrorInsufficientDriver", kInsufficientText, -1, 0, 13000);
  BOOST_TEST(int(p.state) == int(CudaAvailability::Absent));
  BOOST_TEST(p.devices == 0);  // not cudaGetDeviceCount's untouched -1
  BOOST_TEST(cuda_unusable_exit_code(p) == 77);
  BOOST_TEST(has(p.reason, "no CUDA driver"), p.reason);
  BOOST_TEST(has(p.reason, kInsufficientText), p.reason);
  BOOST_TEST(has(p.reason, "driver none, runtime 13.0"), p.reason);
}

BOOST_AUTO_TEST_CASE(no_device_or_zero_devices_is_absent) {
  const CudaProbe none = classify_cuda_probe(kCudaErrorNoDevice, "cudaErrorNoDevice",
                                             "no CUDA-capable device is detected", 0, 12040, 13000);
  BOOST_TEST(int(none.state) == int(CudaAvailability::Absent));
  BOOST_TEST(cuda_unusable_exit_code(none) == 77);
  BOOST_TEST(has(none.reason, "no CUDA-capable device is detected (cudaErrorNoDevice)"), none.reason);
  BOOST_TEST(has(none.reason, "CUDA driver 12.4, runtime 13.0"), none.reason);
  // CUDA_VISIBLE_DEVICES="" : success with zero devices
  const CudaProbe zero = classify_cuda_probe(kCudaSuccess, "cudaSuccess", "no error", 0, 13000, 13000);
  BOOST_TEST(int(zero.state) == int(CudaAvailability::Absent));
  BOOST_TEST(has(zero.reason, "CUDA_VISIBLE_DEVICES"), zero.reason);
  BOOST_TEST(!has(zero.reason, "no error"), zero.reason);
}

// A GPU machine whose driver supports CUDA 12.4 running a CUDA 13 build: a failure that says why, never a skip.
BOOST_AUTO_TEST_CASE(driver_too_old_is_broken_and_fails) {
  const CudaProbe p =
      classify_cuda_probe(kInsufficientDriver, "cudaErrorInsufficientDriver", kInsufficientText, 0, 12040, 13000);
  BOOST_TEST(int(p.state) == int(CudaAvailability::Broken));
  BOOST_TEST(cuda_unusable_exit_code(p) == 1);
  BOOST_TEST(has(p.reason, std::string(kInsufficientText) + " (cudaErrorInsufficientDriver)"), p.reason);
  BOOST_TEST(has(p.reason, "CUDA driver 12.4, runtime 13.0"), p.reason);
  BOOST_TEST(has(p.reason, "update the driver"), p.reason);
}

BOOST_AUTO_TEST_CASE(other_failures_with_a_driver_are_broken) {
  const CudaProbe p = classify_cuda_probe(kInitializationError, "cudaErrorInitializationError", "initialization error",
                                          0, 13000, 13000);
  BOOST_TEST(int(p.state) == int(CudaAvailability::Broken));
  BOOST_TEST(has(p.reason, "cudaGetDeviceCount: initialization error (cudaErrorInitializationError)"), p.reason);
  BOOST_TEST(!has(p.reason, "update the driver"), p.reason);  // same versions: not the driver's age
  // no strings from the runtime: still a message
  const CudaProbe q = classify_cuda_probe(kInitializationError, nullptr, nullptr, 0, 13000, 13000);
  BOOST_TEST(has(q.reason, "unknown CUDA error"), q.reason);
}

#ifdef CAIRN_HAVE_CUDA_BACKEND
#include "cairn/kernels/backend.h"

// This machine's probe is consistent with its driver: without one (CI here) it is Absent, so the gpu tests skip
// (77) rather than fail, and backend_unavailable_reason carries the probe's reason.
BOOST_AUTO_TEST_CASE(this_machine) {
  const CudaProbe& p = probe_cuda();
  BOOST_TEST_MESSAGE("probe: state " << int(p.state) << ", devices " << p.devices << ", driver " << p.driver_version
                                     << ", runtime " << p.runtime_version << ": " << p.reason);
  BOOST_TEST(&p == &probe_cuda());  // asked once
  BOOST_TEST(p.runtime_version > 0);
  if (p.driver_version == 0) {
    BOOST_TEST(int(p.state) == int(CudaAvailability::Absent));
    BOOST_TEST(cuda_unusable_exit_code(p) == 77);
  }
  if (!p.usable()) {
    BOOST_TEST(find_backend("cuda") == nullptr);
    const char* why = backend_unavailable_reason("cuda");
    BOOST_REQUIRE(why);
    BOOST_TEST(std::string(why) == "backend \"cuda\": " + p.reason);
    BOOST_TEST(backend_unavailable_is_failure("cuda") == (p.state == CudaAvailability::Broken));
  }
}
#endif
