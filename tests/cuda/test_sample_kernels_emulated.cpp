// SPDX-License-Identifier: MIT OR Apache-2.0
// kernel_src/sample.cu compiled for the host against the CUDA emulation: argmax against the ids
// torch.argmax gives (tests/support/decoder_mirror.hpp's rows: ties, the first and last index,
// infinities, signed zeros, NaN) at block sizes from one thread to 1024, powers of two or not,
// and blocks wider than the row.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "decoder_mirror.hpp"
#include "metrale_cuda_emulation.hpp"

// The kernel source itself, as NVRTC sees it.
#include "sample.cu"

namespace {

const __nv_bfloat16* sample_bf(const std::vector<uint16_t>& v) { return reinterpret_cast<const __nv_bfloat16*>(v.data()); }

}  // namespace

TEST_CASE("argmax: torch.argmax's id per row, whatever the block size") {
  for (const uint32_t vocab : {1001u, 64u}) {
    const auto rows = decoder_mirror::argmax_rows(vocab, 5);
    for (const unsigned block : {1u, 32u, 96u, 100u, 256u, 1024u}) {
      CAPTURE(vocab);
      CAPTURE(block);
      std::vector<int> ids(rows.m, -7);
      emu::launch({rows.m, 1, 1}, {block, 1, 1}, [&] { argmax(sample_bf(rows.logits), ids.data(), rows.m, vocab); });
      CHECK(std::vector<int32_t>(ids.begin(), ids.end()) == rows.ids);
    }
  }
}

TEST_CASE("argmax: a grid wider than m writes no id past the m-th") {
  const auto rows = decoder_mirror::argmax_rows(64, 6);
  std::vector<int> ids(rows.m + 2, -7);
  emu::launch({rows.m + 2, 1, 1}, {64, 1, 1}, [&] { argmax(sample_bf(rows.logits), ids.data(), rows.m, 64); });
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + rows.m) == rows.ids);
  CHECK(ids[rows.m] == -7);
  CHECK(ids[rows.m + 1] == -7);
}
