// SPDX-License-Identifier: MIT OR Apache-2.0
// Small helpers shared by the layer tests.
#pragma once

#include <metrale/status.hpp>

#include "../support/test_support.hpp"  // TempDir, write_file

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace layers_test {

// Temporary directories and files: the one implementation all test programs share.
using metrale::testing::TempDir;
using metrale::testing::write_file;

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The message of the metrale::Error `fn` throws, or "(no error)".
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const metrale::Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace layers_test
