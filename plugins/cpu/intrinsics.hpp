// SPDX-License-Identifier: MIT OR Apache-2.0
// <immintrin.h> for the AVX-512 tiers' units, included first in each. GCC 12's AVX-512
// intrinsics seed results with a self-initialised "undefined" vector, which -Wuninitialized
// reports wherever they are inlined (GCC bug 105593); the warning is silenced for the header's
// own lines only, and later includes of <immintrin.h> are no-ops behind its guard.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
