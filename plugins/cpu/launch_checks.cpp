// SPDX-License-Identifier: MIT OR Apache-2.0
#include "launch_checks.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>

namespace metrale::cpu {

uint64_t product(std::initializer_list<uint64_t> factors) {
  uint64_t result = 1;
  for (uint64_t factor : factors) {
    if (factor != 0 && result > std::numeric_limits<uint64_t>::max() / factor)
      return std::numeric_limits<uint64_t>::max();
    result *= factor;
  }
  return result;
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, value);
  return text;
}

bool holds(const KernelArgs& args, const MemoryView& memory, unsigned index, uint64_t bytes) {
  const uint64_t address = args.v[index];
  return address != 0 && (bytes == 0 || memory.extent(address) >= bytes);
}

bool buffer(const KernelArgs& args, const MemoryView& memory, unsigned index, const char* name, uint64_t bytes,
            const char* what, std::string& error) {
  if (holds(args, memory, index, bytes)) return true;
  const uint64_t address = args.v[index];
  if (address == 0) {
    error = std::string("argument '") + name + "' is a null pointer";
    return false;
  }
  const uint64_t extent = memory.extent(address);
  if (extent == 0) {
    error = std::string("argument '") + name + "' (" + hex(address) +
            ") is not inside any live allocation of this cpu backend instance";
    return false;
  }
  error = std::string("argument '") + name + "' (" + hex(address) + ") must hold " +
          (bytes == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64") : std::to_string(bytes)) +
          " bytes (" + what + ") but its allocation ends " + std::to_string(extent) + " bytes after it";
  return false;
}

bool at_least_one(std::initializer_list<std::pair<const char*, uint32_t>> values, std::string& error) {
  for (const auto& [name, value] : values) {
    if (value == 0) {
      error = std::string(name) + " must be at least 1 (got 0)";
      return false;
    }
  }
  return true;
}

bool k_ok(uint32_t k, std::string& error) {
  if (k == 0 || k % kGroup != 0 || k > kMaxK) {
    error = "k must be a positive multiple of 128 and at most " + std::to_string(kMaxK) +
            " (got k=" + std::to_string(k) + ")";
    return false;
  }
  return true;
}

bool group_ok(uint32_t group, std::string& error) {
  if (group != 32 && group != 64 && group != 128) {
    error = "group must be 32, 64 or 128 (got group=" + std::to_string(group) + ")";
    return false;
  }
  return true;
}

bool m_ok(uint32_t m, uint32_t max_m, const char* hint, std::string& error) {
  if (m == 0 || (max_m != 0 && m > max_m)) {
    error = max_m == 0 ? "m must be at least 1 (got 0)"
                       : "m must be 1.." + std::to_string(max_m) + " for this kernel (got m=" + std::to_string(m) +
                             ")" + hint;
    return false;
  }
  return true;
}

bool rotary_head_dim_ok(uint32_t head_dim, std::string& error) {
  if (head_dim == 0 || head_dim % 2 != 0 || head_dim > kMaxHeadDim) {
    error = "head_dim must be even, 2.." + std::to_string(kMaxHeadDim) + " (got head_dim=" + std::to_string(head_dim) + ")";
    return false;
  }
  return true;
}

bool finite_ok(float value, const char* name, bool non_negative, std::string& error) {
  if (std::isfinite(value) && (!non_negative || value >= 0.0f)) return true;
  error = std::string(name) + " must be a finite" + (non_negative ? " non-negative" : "") + " f32 (got " +
          std::to_string(value) + ")";
  return false;
}

bool disjoint(uint64_t first, uint64_t bytes, uint64_t other, uint64_t bytes_other) {
  return first >= other + bytes_other || other >= first + bytes;
}

bool apart(const Span* spans, unsigned count, unsigned first_output, std::string& error, const char* why) {
  for (unsigned out = first_output; out < count; ++out) {
    for (unsigned other = 0; other < out; ++other) {
      const Span& a = spans[out];
      const Span& b = spans[other];
      if (a.bytes == 0 || b.bytes == 0 || disjoint(a.address, a.bytes, b.address, b.bytes)) continue;
      error = std::string("argument '") + a.name + "' (" + hex(a.address) + ", " + std::to_string(a.bytes) +
              " bytes) overlaps '" + b.name + "' (" + hex(b.address) + ", " + std::to_string(b.bytes) +
              " bytes); " + why;
      return false;
    }
  }
  return true;
}

bool rows_in_range(const KernelArgs& a, const MemoryView& mem, unsigned source, const char* source_name,
                   const char* index_name, const int32_t* indices, uint64_t count, uint32_t h, std::string& error) {
  const uint64_t rows = mem.extent(a.v[source]) / (uint64_t{h} * 2);
  for (uint64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || static_cast<uint64_t>(indices[i]) >= rows) {
      error = std::string(index_name) + "[" + std::to_string(i) + "] = " + std::to_string(indices[i]) +
              " is not a row of '" + source_name + "', whose allocation holds " + std::to_string(rows) +
              " rows of h=" + std::to_string(h) + " bf16 from there";
      return false;
    }
  }
  return true;
}

bool offsets_ok(const KernelArgs& a, unsigned index, uint32_t groups, std::string& error) {
  const auto* offsets = arg_ptr<const int32_t>(a, index);
  if (offsets[0] < 0) {
    error = "offsets[0] = " + std::to_string(offsets[0]) + " is negative";
    return false;
  }
  for (uint32_t g = 0; g < groups; ++g) {
    if (offsets[g + 1] < offsets[g]) {
      error = "offsets must be non-decreasing: offsets[" + std::to_string(g + 1) + "] = " +
              std::to_string(offsets[g + 1]) + " < offsets[" + std::to_string(g) + "] = " + std::to_string(offsets[g]);
      return false;
    }
  }
  return true;
}

}  // namespace metrale::cpu
