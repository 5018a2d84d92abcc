// SPDX-License-Identifier: MIT OR Apache-2.0
#include "compile_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace metrale::cuda {
namespace {

constexpr char kMagic[8] = {'M', 'T', 'R', 'L', 'C', 'U', 'D', 'A'};

// Fixed little-endian header; fields are written one by one, never as a struct image.
struct Header {
  uint32_t version = kCacheFormatVersion;
  uint32_t header_size = 0;
  CacheKey key{};
  uint64_t image_size = 0;
  uint64_t log_size = 0;
  uint32_t is_cubin = 1;
  uint64_t checksum = 0;  // xxh3-64 of the header (checksum field zero) + image + log
};
constexpr size_t kHeaderSize = 8 + 4 + 4 + 16 + 8 + 8 + 4 + 8;

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <class T>
T get(const std::string& in, size_t& pos) {
  T value{};
  std::memcpy(&value, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return value;
}

std::string encode_header(const Header& h) {
  std::string out(kMagic, sizeof(kMagic));
  put(out, h.version);
  put(out, h.header_size);
  out.append(reinterpret_cast<const char*>(h.key.data()), h.key.size());
  put(out, h.image_size);
  put(out, h.log_size);
  put(out, h.is_cubin);
  put(out, h.checksum);
  return out;
}

uint64_t checksum_of(Header h, const std::byte* image, size_t image_size, const char* log, size_t log_size) {
  h.checksum = 0;
  const std::string header = encode_header(h);
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, header.data(), header.size());
  XXH3_64bits_update(state, image, image_size);
  XXH3_64bits_update(state, log, log_size);
  const uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return sum;
}

std::string errno_text(int error) { return std::generic_category().message(error); }

std::string file_kind(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
  }
}

// Reads a whole entry into `bytes`. nullopt: read; "": no entry (a plain miss); otherwise why the
// entry cannot be used. Opened without blocking and checked on the descriptor, so a FIFO, a
// device or a directory in its place is never read, and nothing beyond kMaxEntryBytes is.
std::optional<std::string> read_entry(const std::filesystem::path& path, std::string& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return "it is " + file_kind(st.st_mode) + ", not a regular file";
    return error == ENOENT ? std::string() : "cannot open it: " + errno_text(error);
  }
  struct stat st {};
  std::optional<std::string> problem;
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat it: " + errno_text(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "it is " + file_kind(st.st_mode) + ", not a regular file";
  } else if (static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    problem = "it is " + std::to_string(st.st_size) + " bytes, larger than the " + std::to_string(kMaxEntryBytes >> 20) +
              " MiB an entry may be";
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (!problem && done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) problem = "read error: " + errno_text(errno);
      else if (n == 0) bytes.resize(done);  // shrank meanwhile: the size check below reports it
      else done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return problem;
}

}  // namespace

std::string to_hex(const CacheKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : key) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

CacheKeyBuilder& CacheKeyBuilder::add(std::string_view field) {
  put(material_, static_cast<uint64_t>(field.size()));
  material_.append(field);
  return *this;
}

CacheKey CacheKeyBuilder::finish() const {
  const XXH128_hash_t hash = XXH3_128bits(material_.data(), material_.size());
  CacheKey key{};
  std::memcpy(key.data(), &hash.high64, 8);
  std::memcpy(key.data() + 8, &hash.low64, 8);
  return key;
}

CompileCache::CompileCache(std::filesystem::path root, HostLog log)
    : dir_(std::move(root) / "cuda"), log_(log) {}

std::filesystem::path CompileCache::entry_path(const CacheKey& key) const {
  return dir_ / (to_hex(key) + ".mcache");
}

std::optional<CacheEntry> CompileCache::load(const CacheKey& key) const {
  const auto path = entry_path(key);
  const auto corrupt = [&](const std::string& why) -> std::optional<CacheEntry> {
    log_.warn("compile cache entry " + path.string() + " is corrupt (" + why + "); rebuilding it");
    return std::nullopt;
  };
  std::string bytes;
  if (const auto problem = read_entry(path, bytes)) {
    if (problem->empty()) return std::nullopt;  // a plain miss
    return corrupt(*problem);
  }
  if (bytes.size() < kHeaderSize) return corrupt("truncated header: " + std::to_string(bytes.size()) + " bytes");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return corrupt("bad magic");
  size_t pos = sizeof(kMagic);
  Header h;
  h.version = get<uint32_t>(bytes, pos);
  h.header_size = get<uint32_t>(bytes, pos);
  std::memcpy(h.key.data(), bytes.data() + pos, h.key.size());
  pos += h.key.size();
  h.image_size = get<uint64_t>(bytes, pos);
  h.log_size = get<uint64_t>(bytes, pos);
  h.is_cubin = get<uint32_t>(bytes, pos);
  h.checksum = get<uint64_t>(bytes, pos);
  if (h.version != kCacheFormatVersion) return corrupt("format version " + std::to_string(h.version));
  if (h.header_size != kHeaderSize) return corrupt("header size " + std::to_string(h.header_size));
  if (h.key != key) return corrupt("holds key " + to_hex(h.key));
  if (h.image_size > bytes.size() || h.log_size > bytes.size() ||
      kHeaderSize + h.image_size + h.log_size != bytes.size()) {
    return corrupt("size mismatch: header promises " + std::to_string(kHeaderSize + h.image_size + h.log_size) +
                   " bytes, file has " + std::to_string(bytes.size()));
  }
  const auto* image = reinterpret_cast<const std::byte*>(bytes.data() + kHeaderSize);
  const char* log = bytes.data() + kHeaderSize + h.image_size;
  if (checksum_of(h, image, h.image_size, log, h.log_size) != h.checksum) return corrupt("checksum mismatch");
  CacheEntry entry;
  entry.image.assign(image, image + h.image_size);
  entry.is_cubin = h.is_cubin != 0;
  entry.log.assign(log, h.log_size);
  return entry;
}

bool CompileCache::store(const CacheKey& key, const CacheEntry& entry) const {
  static std::atomic<uint64_t> counter{0};
  const auto path = entry_path(key);
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    log_.warn("compile cache: cannot create " + dir_.string() + ": " + ec.message());
    return false;
  }
  Header h;
  h.header_size = kHeaderSize;
  h.key = key;
  h.image_size = entry.image.size();
  h.log_size = entry.log.size();
  h.is_cubin = entry.is_cubin ? 1 : 0;
  h.checksum = checksum_of(h, entry.image.data(), entry.image.size(), entry.log.data(), entry.log.size());
  std::string bytes = encode_header(h);
  bytes.append(reinterpret_cast<const char*>(entry.image.data()), entry.image.size());
  bytes.append(entry.log);

  // Unique per process and call, in the entry's directory so rename() stays atomic.
  const auto tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    log_.warn("compile cache: cannot create " + tmp + ": " + errno_text(errno));
    return false;
  }
  size_t done = 0;
  int error = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  // A directory where the entry belongs (rename cannot replace it): removed when empty.
  if (struct stat st {}; error == 0 && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
                         ::rmdir(path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    log_.warn("compile cache: cannot replace " + path.string() + ": it is a directory that cannot be removed (" +
              errno_text(errno) + "); remove it to let the cache store this module");
    return false;
  }
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(tmp.c_str());
    log_.warn("compile cache: cannot write " + path.string() + ": " + errno_text(error));
    return false;
  }
  return true;
}

}  // namespace metrale::cuda
