// cairn-train's float buffers in a kernel backend's memory (host for CPU backends, device memory for CUDA).
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "cairn/kernels/backend.h"

namespace cairn::train {

// A float buffer in the backend's memory, owned, zeroed.
struct BackendBuffer {
  const kernels::Backend* backend = nullptr;
  float* ptr = nullptr;
  size_t n = 0;
  BackendBuffer() = default;
  BackendBuffer(const kernels::Backend* b, size_t count) : backend(b), n(count) {
    if (n) ptr = static_cast<float*>(b->alloc(n * sizeof(float)));
  }
  ~BackendBuffer() {
    if (ptr) backend->free(ptr);
  }
  BackendBuffer(BackendBuffer&& o) noexcept : backend(o.backend), ptr(o.ptr), n(o.n) { o.ptr = nullptr; }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    std::swap(backend, o.backend);
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
  float* data() const { return ptr; }
};

// Host-readable floats at backend pointer `src`, for as long as the buffer is not written: the pointer itself on
// host-memory backends, else a host copy. A checkpoint of GPT-2 124M on one CPU rank spent 3.4 of its 11.6 s
// copying parameters and moments into fresh vectors (every page faulted in) only to write them out.
class HostFloats {
 public:
  HostFloats() = default;
  HostFloats(const kernels::Backend& b, const float* src, size_t n) {
    if (!b.device_memory) {
      ptr_ = src;
      return;
    }
    copy_.resize(n);
    if (n) b.copy_to_host(copy_.data(), src, n * sizeof(float));
    ptr_ = copy_.data();
  }
  HostFloats(HostFloats&&) noexcept = default;  // a moved vector keeps its buffer, so ptr_ stays valid
  HostFloats& operator=(HostFloats&&) noexcept = default;
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;
  const float* data() const { return ptr_; }

 private:
  std::vector<float> copy_;
  const float* ptr_ = nullptr;
};

// Host copy of `n` floats at backend pointer `src` (a plain copy on CPU backends).
inline std::vector<float> to_host(const kernels::Backend& b, const float* src, size_t n) {
  std::vector<float> out(n);
  if (n) b.copy_to_host(out.data(), src, n * sizeof(float));
  return out;
}

}  // namespace cairn::train
