// SPDX-License-Identifier: MIT OR Apache-2.0
// The grid arithmetic every layer's launches share: a 1-D block of `block` threads over `grid`,
// on `stream`. Plain functions, no state.
#pragma once

#include <metrale/backend.hpp>

#include <array>
#include <cstdint>

namespace metrale::layers {

constexpr uint32_t ceil_div(uint32_t a, uint32_t b) noexcept { return (a + b - 1) / b; }

inline LaunchShape launch_shape(std::array<uint32_t, 3> grid, uint32_t block, uint64_t stream) noexcept {
  LaunchShape s;
  s.grid = grid;
  s.block = {block, 1, 1};
  s.stream = stream;
  return s;
}

}  // namespace metrale::layers
