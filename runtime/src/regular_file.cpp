// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

namespace metrale {

namespace {

std::string errno_text(int error) { return std::generic_category().message(error); }

}  // namespace

std::string_view file_type_name(unsigned mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

std::string size_limit_text(uint64_t bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

RegularFile::RegularFile(std::filesystem::path path, std::string_view what) : path_(std::move(path)), what_(what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st {};
  if (fd_ < 0) {
    const int error = errno;
    // A socket cannot be opened at all (ENXIO): say what it is rather than the errno.
    if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      throw Error(Status::invalid_argument, path_.string() + ": cannot read the " + what_ + ": it is " +
                                                std::string(file_type_name(st.st_mode)) + ", not a regular file");
    }
    throw Error(Status::not_found, path_.string() + ": cannot read the " + what_ + ": " + errno_text(error));
  }
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    throw Error(Status::not_found, path_.string() + ": cannot read the " + what_ + ": " + errno_text(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(Status::invalid_argument, path_.string() + ": cannot read the " + what_ + ": it is " +
                                              std::string(file_type_name(st.st_mode)) + ", not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (mapped_ != nullptr) ::munmap(mapped_, size_);
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), what_(std::move(other.what_)), fd_(std::exchange(other.fd_, -1)),
      size_(other.size_), bytes_read_(other.bytes_read_), mapped_(std::exchange(other.mapped_, nullptr)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (mapped_ != nullptr) ::munmap(mapped_, size_);
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    bytes_read_ = other.bytes_read_;
    mapped_ = std::exchange(other.mapped_, nullptr);
  }
  return *this;
}

std::span<const std::byte> RegularFile::mapping() const {
  if (size_ == 0) return {};
  if (mapped_ == nullptr) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      throw Error(Status::invalid_argument, path_.string() + ": cannot map the " + what_ + ": " + errno_text(errno));
    }
    mapped_ = p;
  }
  return {static_cast<const std::byte*>(mapped_), size_};
}

void RegularFile::release_mapped(uint64_t offset, uint64_t bytes) const noexcept {
  if (mapped_ == nullptr || offset >= size_) return;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = (offset + page - 1) / page * page, end = std::min(offset + bytes, size_) / page * page;
  if (end > first) ::madvise(static_cast<std::byte*>(mapped_) + first, end - first, MADV_DONTNEED);
}

void RegularFile::read_at(uint64_t offset, std::span<std::byte> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(Status::invalid_argument, path_.string() + ": cannot read the " + what_ + ": " + errno_text(errno));
    }
    if (n == 0) {
      throw Error(Status::invalid_argument, path_.string() + ": the " + what_ + " ended after " +
                                                std::to_string(offset + done) + " bytes, but " +
                                                std::to_string(offset + out.size()) +
                                                " were expected (did it change while being read?)");
    }
    done += static_cast<size_t>(n);
  }
  bytes_read_ += out.size();
}

std::string RegularFile::read_all(std::size_t max_bytes) const {
  const auto too_large = [&](const std::string& size) {
    return Error(Status::invalid_argument, path_.string() + ": cannot read the " + what_ + ": it is " + size +
                                               ", more than the " + size_limit_text(max_bytes) + " allowed");
  };
  if (size_ > max_bytes) throw too_large(std::to_string(size_) + " bytes");
  // Read to the end rather than trusting the size: the file may have grown since fstat.
  std::string text(static_cast<size_t>(size_), '\0');
  size_t used = 0;
  for (;;) {
    if (used == text.size()) {
      if (used > max_bytes) throw too_large("growing while read, now over " + std::to_string(max_bytes) + " bytes");
      text.resize(std::min<size_t>(max_bytes + 1, std::max<size_t>(used * 2, 4096)));
    }
    const ssize_t n = ::pread(fd_, text.data() + used, text.size() - used, static_cast<off_t>(used));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(Status::invalid_argument, path_.string() + ": cannot read the " + what_ + ": " + errno_text(errno));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  text.resize(used);
  bytes_read_ += used;
  return text;
}

std::string read_regular_file(const std::filesystem::path& path, std::string_view what, std::size_t max_bytes) {
  return RegularFile(path, what).read_all(max_bytes);
}

}  // namespace metrale
