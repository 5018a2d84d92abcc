// SPDX-License-Identifier: MIT OR Apache-2.0
// The pieces every launch validator is made of (kernel_table.cpp, quant_checks.cpp): pointer
// arguments inside live allocations large enough, shape rules, index arrays in range, outputs
// apart from inputs. Each returns false with one message naming the argument and the numbers.
#pragma once

#include "kernel_table.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

namespace metrale::cpu {

inline constexpr metrale_status kInvalid = METRALE_STATUS_INVALID_ARGUMENT;
inline constexpr metrale_status kOk = METRALE_STATUS_OK;

// Keeps a weight row under 32 MiB and every offset along K (in elements, bytes or 8-wide units)
// far inside 32 bits, which the kernels' index arithmetic relies on.
inline constexpr uint32_t kMaxK = uint32_t{1} << 26;

inline uint32_t ceil_div(uint32_t a, uint32_t b) { return a / b + (a % b != 0); }

// Saturating product: an overflow becomes "more bytes than any allocation has".
uint64_t product(std::initializer_list<uint64_t> factors);
std::string hex(uint64_t value);

// Whether argument `index` points at `bytes` bytes inside one live allocation (no message).
bool holds(const KernelArgs& args, const MemoryView& memory, unsigned index, uint64_t bytes);
// The same, with the message naming `name` and what it must hold (`what`).
bool buffer(const KernelArgs& args, const MemoryView& memory, unsigned index, const char* name, uint64_t bytes,
            const char* what, std::string& error);
// The same, with `what` made by a callable only when the check fails: a launch that passes
// builds no string.
template <class Describe>
  requires std::is_invocable_r_v<std::string, const Describe&>
bool buffer(const KernelArgs& args, const MemoryView& memory, unsigned index, const char* name, uint64_t bytes,
            const Describe& what, std::string& error) {
  return holds(args, memory, index, bytes) || buffer(args, memory, index, name, bytes, what().c_str(), error);
}
bool at_least_one(std::initializer_list<std::pair<const char*, uint32_t>> values, std::string& error);
// k is a positive multiple of 128, at most kMaxK.
bool k_ok(uint32_t k, std::string& error);
// The group size argument is 32, 64 or 128.
bool group_ok(uint32_t group, std::string& error);
// m is at least 1 and at most `max_m` (0: unbounded); `hint` ends the message.
bool m_ok(uint32_t m, uint32_t max_m, const char* hint, std::string& error);
// A rotary head_dim (rope, qk_norm_rope): even, 2..kMaxHeadDim (one token's cos/sin fill the
// scratch).
bool rotary_head_dim_ok(uint32_t head_dim, std::string& error);

// value is finite (and >= 0 when `non_negative`); the message names `name`.
bool finite_ok(float value, const char* name, bool non_negative, std::string& error);

// [first, first + bytes) and [other, other + bytes_other) share no byte.
bool disjoint(uint64_t first, uint64_t bytes, uint64_t other, uint64_t bytes_other);
// The outputs among `count` (address, bytes, name) buffers, those from `first_output` on,
// overlap neither an input nor each other (a repack's blocks read rows others may be writing);
// `why` ends the message.
struct Span {
  uint64_t address, bytes;
  const char* name;
};
bool apart(const Span* spans, unsigned count, unsigned first_output, std::string& error,
           const char* why = "the repack's output never aliases its input");

// Every index in `indices` (count of them) names a row of h bf16 of the buffer at argument
// `source`.
bool rows_in_range(const KernelArgs& a, const MemoryView& mem, unsigned source, const char* source_name,
                   const char* index_name, const int32_t* indices, uint64_t count, uint32_t h, std::string& error);

// The i32 offsets [groups + 1] at argument `index` (already checked to be large enough):
// offsets[0] >= 0, non-decreasing.
bool offsets_ok(const KernelArgs& a, unsigned index, uint32_t groups, std::string& error);

}  // namespace metrale::cpu
