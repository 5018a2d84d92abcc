// SPDX-License-Identifier: MIT OR Apache-2.0
// Comparing kernel results with a reference: every element within its budget, and the worst
// one described for the failure message. A reference NaN matches only a NaN.
#pragma once

#include "support.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace cpu_test {

struct Mismatch {
  size_t count = 0;
  double worst_ratio = 0;  // error / budget of the worst element
  std::string worst;
};

template <class Budget>
Mismatch compare(const std::vector<double>& got, const std::vector<double>& ref, Budget budget, uint32_t columns) {
  Mismatch m;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i]) || std::isnan(got[i])) {
      if (std::isnan(ref[i]) && std::isnan(got[i])) continue;
      ++m.count;
      m.worst_ratio = INFINITY;
      std::ostringstream text;
      text << "[" << i / columns << "][" << i % columns << "] got " << got[i] << " want " << ref[i];
      m.worst = text.str();
      continue;
    }
    const double error = std::fabs(got[i] - ref[i]);
    const double allowed = budget(i);
    const double ratio = error / allowed;
    if (!(error <= allowed)) ++m.count;
    if (!(ratio <= m.worst_ratio)) {
      m.worst_ratio = ratio;
      std::ostringstream text;
      text << "[" << i / columns << "][" << i % columns << "] got " << got[i] << " want " << ref[i] << " (error "
           << error << ", budget " << allowed << ")";
      m.worst = text.str();
    }
  }
  return m;
}

inline std::vector<double> widen_bf16(const std::vector<uint16_t>& values) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16_value(values[i]);
  return out;
}

}  // namespace cpu_test
