// SPDX-License-Identifier: MIT OR Apache-2.0
// On-disk cache of compiled modules. One file per key under <cache_dir>/cuda/:
//   header  magic "MTRLCUDA", format version, header size, key, image and log sizes, image kind,
//           an xxh3-64 checksum of everything else in the file
//   image   the CUBIN (or PTX when the device is newer than NVRTC)
//   log     NVRTC's log (ptxas resource usage, for `metrale compile` on a hit)
// Writes go to a unique temporary file in the same directory, are flushed, then renamed over
// the entry: readers see a whole entry or none, and two processes filling the same key at once
// both leave a valid file. An entry that fails any check is reported as corrupt, never loaded;
// so is anything that is not a regular file (a FIFO, a device, a directory: never read, so never
// a hang) or that is larger than kMaxEntryBytes. Each is rebuilt and replaced (a directory only
// when empty; otherwise the warning says to remove it).
#pragma once

#include "host_log.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace metrale::cuda {

// Bump when the entry layout or the meaning of a key input changes.
inline constexpr uint32_t kCacheFormatVersion = 1;
// A compiled module is a few megabytes; an entry beyond this is not read.
inline constexpr uint64_t kMaxEntryBytes = uint64_t{256} << 20;

using CacheKey = std::array<uint8_t, 16>;  // xxh3-128 of the key material
std::string to_hex(const CacheKey& key);

// Builds the key: every input is length-prefixed so no two different inputs collide by
// concatenation.
class CacheKeyBuilder {
 public:
  CacheKeyBuilder& add(std::string_view field);
  CacheKey finish() const;

 private:
  std::string material_;
};

struct CacheEntry {
  std::vector<std::byte> image;
  bool is_cubin = true;
  std::string log;
};

class CompileCache {
 public:
  CompileCache(std::filesystem::path root, HostLog log);

  // The entry, or nullopt on a miss. A present but corrupt entry is warned about (with the
  // reason) and reported as a miss so the caller rebuilds and overwrites it.
  std::optional<CacheEntry> load(const CacheKey& key) const;
  // Best effort: failing to write warns and returns false; the compile result stands.
  bool store(const CacheKey& key, const CacheEntry& entry) const;

  std::filesystem::path entry_path(const CacheKey& key) const;
  const std::filesystem::path& directory() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
  HostLog log_;
};

}  // namespace metrale::cuda
