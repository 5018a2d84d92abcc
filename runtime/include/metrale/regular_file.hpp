// SPDX-License-Identifier: MIT OR Apache-2.0
// Opening files that come from outside the program (manifests, model configs, checkpoints, locks).
// Anything that is not a regular file (a FIFO, a device, a directory, a socket) is refused on the
// open descriptor before a byte is read, so such a path can neither block nor stream forever, and
// whole-file reads stop at a cap. Every error is a metrale::Error naming the file, what it was
// read as, and what was expected. docs/architecture.md, "Reading untrusted files".
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace metrale {

class RegularFile {
 public:
  // Opens `path` read-only without blocking (a FIFO opens at once instead of waiting for a
  // writer) and checks the descriptor is a regular file. `what` names the document in messages
  // ("model config"). Throws Error(not_found) when it cannot be opened, Error(invalid_argument)
  // when it is not a regular file.
  RegularFile(std::filesystem::path path, std::string_view what);
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  uint64_t size() const noexcept { return size_; }  // when it was opened
  // Exactly out.size() bytes from `offset`; throws Error(invalid_argument) naming the file when
  // the file is shorter (it shrank) or cannot be read.
  void read_at(uint64_t offset, std::span<std::byte> out) const;
  // The whole file; Error(invalid_argument) when it holds more than max_bytes.
  std::string read_all(std::size_t max_bytes) const;
  // The whole file mapped read-only, mapped on the first call and unmapped with the object: its
  // pages are read when touched and count as resident only while they are. Error(invalid_argument)
  // naming the file when it cannot be mapped. Not thread-safe on the first call.
  std::span<const std::byte> mapping() const;
  // Gives the mapped pages of [offset, offset + bytes) back (they are read again if touched).
  void release_mapped(uint64_t offset, uint64_t bytes) const noexcept;
  // Bytes read_at and read_all have read (not the mapping's pages); not thread-safe.
  uint64_t bytes_read() const noexcept { return bytes_read_; }

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0;
  mutable uint64_t bytes_read_ = 0;
  mutable void* mapped_ = nullptr;
};

// RegularFile(path, what).read_all(max_bytes).
std::string read_regular_file(const std::filesystem::path& path, std::string_view what, std::size_t max_bytes);

// "a FIFO (named pipe)", "a directory", "a character device"... for a stat mode.
std::string_view file_type_name(unsigned mode) noexcept;

// "4 MiB", "100 MiB", "1500 bytes": a size limit as messages spell it.
std::string size_limit_text(uint64_t bytes);

}  // namespace metrale
