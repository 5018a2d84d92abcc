// SPDX-License-Identifier: MIT OR Apache-2.0
// The GPU suite's access to the CUDA backend: discovered through the real runtime from the build
// tree's manifest. Without a usable device the programs print one line and exit 77 (skipped).
#pragma once

#include <metrale/registry.hpp>

#include <cstdio>
#include <memory>

namespace metrale::gpu_test {

// The loaded CUDA backend, or nullptr after printing why there is none.
inline std::shared_ptr<Backend> cuda_backend_or_explain(Registry& registry) {
  for (const auto& entry : registry.entries()) {
    if (entry.backend != "cuda") continue;
    if (entry.state == EntryState::loaded && entry.instance) return entry.instance;
    std::printf("SKIP: no usable CUDA device: %s\n", entry.reason.c_str());
    return nullptr;
  }
  std::printf("SKIP: no CUDA manifest discovered (plugin not built?)\n");
  return nullptr;
}

inline Registry discover_cuda() {
  DiscoveryOptions options;
  options.manifests = std::vector<std::filesystem::path>{METRALE_GPU_CUDA_MANIFEST};
  return Registry::discover(options);
}

// Device buffer holding a host vector, freed with the scope.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, size_t bytes) : backend_(backend), ptr_(backend.alloc(bytes)), bytes_(bytes) {}
  template <class T>
  DeviceBuffer(Backend& backend, const std::vector<T>& host) : DeviceBuffer(backend, host.size() * sizeof(T)) {
    backend_.copy_to_device(ptr_, host.data(), bytes_);
  }
  ~DeviceBuffer() {
    try {
      backend_.free(ptr_);
    } catch (...) {
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DevicePtr ptr() const { return ptr_; }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    backend_.copy_to_host(host.data(), ptr_, count * sizeof(T));
    backend_.synchronize();
    return host;
  }

 private:
  Backend& backend_;
  DevicePtr ptr_;
  size_t bytes_;
};

}  // namespace metrale::gpu_test
