// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest files that are not manifests: a FIFO, a device, a huge or deeply nested document.
// Each is one problem naming the file, returned at once (never a hang or a memory blow-up).
#include <doctest/doctest.h>

#include <metrale/manifest.hpp>

#include "test_support.hpp"

#include <sys/stat.h>

using namespace metrale;
using metrale::testing::TempDir;
using metrale::testing::write_file;
namespace fs = std::filesystem;

namespace {

std::string only_problem(const ManifestResult& r) {
  REQUIRE(r.problems.size() == 1);
  CHECK_FALSE(r.manifest);
  return r.problems[0].to_string();
}

}  // namespace

TEST_CASE("a manifest that is a FIFO or a device is refused without reading it") {
  TempDir dir;
  const fs::path fifo = dir / "fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string p = only_problem(load_manifest(fifo));
  CHECK(p.find(fifo.string()) != std::string::npos);
  CHECK(p.find("FIFO") != std::string::npos);

  p = only_problem(load_manifest("/dev/zero"));
  CHECK(p.find("/dev/zero") != std::string::npos);
  CHECK(p.find("character device") != std::string::npos);
}

TEST_CASE("a manifest above the size cap or nested too deeply is one problem") {
  TempDir dir;
  const fs::path big = write_file(dir / "big.json", std::string(5u << 20, ' ') + "{}");
  std::string p = only_problem(load_manifest(big));
  CHECK(p.find(big.string()) != std::string::npos);
  CHECK(p.find("4 MiB") != std::string::npos);

  const fs::path deep = write_file(dir / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
  p = only_problem(load_manifest(deep));
  CHECK(p.find(deep.string()) != std::string::npos);
  CHECK(p.find("nested deeper than 64 levels") != std::string::npos);
  CHECK(p.find("line 1, column 65") != std::string::npos);
}
