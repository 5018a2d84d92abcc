// SPDX-License-Identifier: MIT OR Apache-2.0
// Owned device memory on one Backend, freed in the destructor. Public (docs/embedding.md): a
// program's own rows for EmbeddedFfn::forward_into. The Backend must outlive every buffer made on
// it; a buffer is one owner's (move-only) and as thread-safe as the Backend's copies.
#pragma once

#include <metrale/backend.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace metrale::layers {

inline constexpr size_t kBf16 = 2;  // bytes of one bf16 (or f16) element

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

// A new buffer on `backend` holding a copy of `values` (bytes() 0 for none).
template <class T>
DeviceBuffer device_copy(Backend& backend, const std::vector<T>& values) {
  DeviceBuffer buffer(backend, values.size() * sizeof(T));
  if (!values.empty()) buffer.upload(std::span<const T>(values));
  return buffer;
}

}  // namespace metrale::layers
