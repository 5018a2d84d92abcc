// SPDX-License-Identifier: MIT OR Apache-2.0
// Owned device memory on one Backend (freed in the destructor), and a W4A16 matrix or stack
// uploaded into it. The Backend must outlive every buffer made on it.
#pragma once

#include "w4a16.hpp"

#include <metrale/backend.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace metrale::layers {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const noexcept { return ptr_; }
  DevicePtr at(size_t byte_offset) const noexcept { return ptr_.offset(byte_offset); }
  size_t bytes() const noexcept { return bytes_; }
  // Reallocates (contents lost) when smaller than `bytes`; keeps the buffer otherwise.
  void ensure(Backend& backend, size_t bytes);
  void upload(const void* src, size_t bytes, size_t offset = 0, uint64_t stream = 0);
  template <class T>
  void upload(std::span<const T> values, size_t offset = 0, uint64_t stream = 0) {
    upload(values.data(), values.size_bytes(), offset, stream);
  }
  // Copies `count` elements back and waits for them.
  template <class T>
  std::vector<T> download(size_t count, size_t offset = 0, uint64_t stream = 0) const {
    std::vector<T> out(count);
    download_bytes(out.data(), count * sizeof(T), offset, stream);
    return out;
  }
  void download_bytes(void* dst, size_t bytes, size_t offset = 0, uint64_t stream = 0) const;

 private:
  void release() noexcept;
  Backend* backend_ = nullptr;
  DevicePtr ptr_{};
  size_t bytes_ = 0;
};

// A W4A16 matrix (or stack) on the device in the layout of docs/kernels.md.
struct DeviceW4a16 {
  std::string name;
  uint32_t batch = 1;
  uint32_t n = 0;
  uint32_t k = 0;
  DeviceBuffer qweight;
  DeviceBuffer scales;

  static DeviceW4a16 upload(Backend& backend, const W4a16Matrix& matrix);
  DevicePtr qweight_of(uint32_t index) const noexcept { return qweight.at(size_t{index} * n * (k / 8) * 4); }
  DevicePtr scales_of(uint32_t index) const noexcept { return scales.at(size_t{index} * n * (k / kW4a16GroupSize) * 2); }
  size_t bytes_per_matrix() const noexcept { return size_t{n} * (k / 8) * 4 + size_t{n} * (k / kW4a16GroupSize) * 2; }
};

}  // namespace metrale::layers
