// SPDX-License-Identifier: MIT OR Apache-2.0
// Emulation shim standing in for the toolkit header (see metrale_cuda_emulation.hpp).
#pragma once
#include "metrale_cuda_emulation.hpp"
