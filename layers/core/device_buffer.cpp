// SPDX-License-Identifier: MIT OR Apache-2.0
#include "core/device_buffer.hpp"

#include <metrale/status.hpp>

#include <string>
#include <utility>

namespace metrale::layers {

DeviceBuffer::DeviceBuffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
  // A zero-byte request still gets a distinct allocation of one byte, so ptr() is never null.
  ptr_ = backend.alloc(bytes == 0 ? 1 : bytes);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)), ptr_(std::exchange(other.ptr_, DevicePtr{})),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::exchange(other.backend_, nullptr);
    ptr_ = std::exchange(other.ptr_, DevicePtr{});
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (backend_ && ptr_) {
    try {
      backend_->free(ptr_);
    } catch (...) {
      // A destructor must not throw; the backend has already logged the failure.
    }
  }
  backend_ = nullptr;
  ptr_ = {};
  bytes_ = 0;
}

void DeviceBuffer::ensure(Backend& backend, size_t bytes) {
  if (backend_ == &backend && bytes_ >= bytes) return;
  release();
  *this = DeviceBuffer(backend, bytes);
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset, uint64_t stream) {
  if (!backend_ || offset + bytes > bytes_) {
    throw Error(Status::invalid_argument, "device upload of " + std::to_string(bytes) + " bytes at offset " +
                                              std::to_string(offset) + " into a buffer of " + std::to_string(bytes_));
  }
  if (bytes) backend_->copy_to_device(ptr_.offset(offset), src, bytes, stream);
}

void DeviceBuffer::download_bytes(void* dst, size_t bytes, size_t offset, uint64_t stream) const {
  if (!backend_ || offset + bytes > bytes_) {
    throw Error(Status::invalid_argument, "device download of " + std::to_string(bytes) + " bytes at offset " +
                                              std::to_string(offset) + " from a buffer of " + std::to_string(bytes_));
  }
  if (bytes) {
    backend_->copy_to_host(dst, ptr_.offset(offset), bytes, stream);
    backend_->synchronize(stream);
  }
}

}  // namespace metrale::layers
