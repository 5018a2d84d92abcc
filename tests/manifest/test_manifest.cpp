// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest reading: good manifests and their paths, the file and JSON levels (malformed, empty,
// missing, not an object), problems as text, and parsing from memory. Field-by-field validation
// is in test_manifest_fields.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "manifest_test_docs.hpp"

#include <string>

using namespace metrale;
using namespace metrale::manifest_test;

TEST_CASE("minimal manifest: fields, absolute path, library resolved against its directory") {
  TempDir dir;
  const ManifestResult r = load_doc(dir, minimal_doc());
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  CHECK(r.problems.empty());
  CHECK_FALSE(r.skipped_format);
  const Manifest& m = *r.manifest;
  CHECK(m.path == dir.path() / "manifest.json");
  CHECK(m.path.is_absolute());
  CHECK(m.format_major == 1);
  CHECK(m.format_minor == 0);
  CHECK(m.backend == "cpu");
  CHECK(m.library == dir.path() / "libmetrale_cpu.so");
  CHECK(m.abi_version == 1);
  CHECK(m.priority == 10);
  CHECK(m.description.empty());
  CHECK_FALSE(m.library_checksum.has_value());
  CHECK(m.modules.empty());
  CHECK(m.kernel_count() == 0);
  CHECK(m.find_kernel("w4a16", "w4a16_gemm_t") == nullptr);
  CHECK(m.text == minimal_doc().dump(2));
}

TEST_CASE("full manifest: every field read, lookups, normalized library path") {
  TempDir dir;
  const ManifestResult r = load_doc(dir, full_doc());
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  const Manifest& m = *r.manifest;
  CHECK(m.backend == "cuda");
  CHECK(m.library == dir.path() / "plugins" / "libmetrale_cuda.so");
  CHECK(m.priority == 100);
  CHECK(m.description == "CUDA backend (Driver API + NVRTC)");
  CHECK(m.library_checksum == "xxh3-64:0123456789abcdef");
  REQUIRE(m.modules.size() == 2);
  CHECK(m.modules[0].name == "w4a16");
  CHECK(m.modules[0].source == "w4a16.cu");
  CHECK_FALSE(m.modules[1].source.has_value());
  CHECK(m.kernel_count() == 4);

  const ManifestKernel* gemm = m.find_kernel("w4a16", "w4a16_gemm_t");
  REQUIRE(gemm != nullptr);
  REQUIRE(gemm->params.size() == 7);
  CHECK(gemm->params[0].name == "x");
  CHECK(gemm->params[0].type == METRALE_PARAM_PTR);
  CHECK(gemm->params[6].name == "k");
  CHECK(gemm->params[6].type == METRALE_PARAM_U32);
  CHECK(gemm->min_target == "sm_80");
  CHECK(gemm->weight_layout == "w4a16-nk-g128");
  CHECK(gemm->cpu_features.empty());

  const ManifestKernel* silu = m.find_kernel("act", "silu_mul");
  REQUIRE(silu != nullptr);
  CHECK(silu->cpu_features == std::vector<std::string>{"avx2", "fma"});
  CHECK_FALSE(silu->min_target.has_value());
  CHECK_FALSE(silu->weight_layout.has_value());
  REQUIRE(silu->params.size() == 5);
  CHECK(silu->params[0].type == METRALE_PARAM_I32);
  CHECK(silu->params[1].type == METRALE_PARAM_U64);
  CHECK(silu->params[2].type == METRALE_PARAM_I64);
  CHECK(silu->params[3].type == METRALE_PARAM_F32);
  CHECK(silu->params[4].type == METRALE_PARAM_F64);

  // The same kernel name in two modules is two kernels: lookups are by (module, name).
  const ManifestKernel* other = m.find_kernel("act", "w4a16_gemm_t");
  REQUIRE(other != nullptr);
  CHECK(other != gemm);
  CHECK(other->params.empty());
  CHECK(m.find_kernel("w4a16", "silu_mul") == nullptr);
  CHECK(m.find_kernel("nope", "w4a16_gemm_t") == nullptr);
}

TEST_CASE("paths: absolute library kept (normalized), relative manifest path made absolute") {
  TempDir dir;
  Json doc = with(minimal_doc(), "/library", "/opt/metrale/../lib/./libx.so");
  ManifestResult r = load_doc(dir, doc);
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  CHECK(r.manifest->library == fs::path("/opt/lib/libx.so"));

  // A relative manifest path resolves against the working directory; its library against the
  // manifest's directory, never against the working directory itself.
  r = parse_manifest("some/dir/m.json", minimal_doc().dump());
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  const fs::path cwd = fs::current_path();
  CHECK(r.manifest->path == cwd / "some/dir/m.json");
  CHECK(r.manifest->library == cwd / "some/dir/libmetrale_cpu.so");

  // A ".." that is part of a longer name is not a parent reference.
  r = load_doc(dir, with(minimal_doc(), "/library", "..libx.so"));
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  CHECK(r.manifest->library == dir.path() / "..libx.so");
}

TEST_CASE("relative library path escaping the manifest's directory") {
  TempDir dir;
  for (const std::string lib : {"../libx.so", "plugins/../../libx.so", "plugins/..", "a/../b.so", ".."}) {
    CAPTURE(lib);
    check_single(load_doc(dir, with(minimal_doc(), "/library", lib)), "/library",
                 {"inside the manifest's directory", "\"..\"", "found string"});
  }
  check_single(load_doc(dir, with(minimal_doc(), "/library", "")), "/library",
               {"expected a non-empty library path", "found an empty string"});
}

TEST_CASE("malformed JSON reports line and column") {
  TempDir dir;
  ManifestResult r = load_text(dir, "{\n  \"backend\": \"cpu\",\n}\n");
  check_single(r, "", {"malformed JSON", "line 3, column 1", "expected string literal"});

  r = load_text(dir, "{\n  \"priority\": tru\n}");
  check_single(r, "", {"malformed JSON", "line 2, column", "invalid literal"});

  // The column counts characters, not bytes: "é" is one column.
  r = load_text(dir, "{\"description\": \"\xC3\xA9\" x}");
  check_single(r, "", {"line 1, column 21"});

  // Invalid UTF-8 is a parse error, and the message itself stays valid UTF-8.
  r = load_text(dir, "{\"backend\": \"\xFF\"}");
  check_single(r, "", {"malformed JSON", "UTF-8"});
  CHECK(r.problems[0].message.find('\xFF') == std::string::npos);

  // Numbers outside double range cannot be represented faithfully.
  r = load_text(dir, "{\"priority\": 1e400}");
  check_single(r, "", {"malformed JSON", "1e400"});

  r = load_text(dir, "{} {}");
  check_single(r, "", {"malformed JSON", "line 1, column 4"});
}

TEST_CASE("empty file and whitespace-only file") {
  TempDir dir;
  check_single(load_text(dir, ""), "", {"malformed JSON", "empty", "expected a JSON object"});
  check_single(load_text(dir, " \n\t\r\n"), "", {"malformed JSON", "empty"});
}

TEST_CASE("file missing, or a directory") {
  TempDir dir;
  const fs::path missing = dir.path() / "nope.json";
  ManifestResult r = load_manifest(missing);
  check_single(r, "", {"cannot read", "No such file"});
  CHECK(r.problems[0].file == missing);

  fs::create_directory(dir.path() / "sub.json");
  check_single(load_manifest(dir.path() / "sub.json"), "", {"cannot read", "directory"});
}

TEST_CASE("the top level must be an object") {
  TempDir dir;
  check_single(load_text(dir, "[]"), "", {"expected a JSON object", "found an empty array"});
  check_single(load_text(dir, "3"), "", {"expected a JSON object", "found number 3"});
  check_single(load_text(dir, "\"x\""), "", {"expected a JSON object", "found string \"x\""});
}

TEST_CASE("ManifestProblem::to_string") {
  const ManifestProblem whole{"/etc/m.json", "", "malformed JSON"};
  CHECK(whole.to_string() == "/etc/m.json: (document): malformed JSON");
  const ManifestProblem field{"m.json", "/modules/0/name", "expected an identifier"};
  CHECK(field.to_string() == "m.json: /modules/0/name: expected an identifier");

  // Problems carry the file as the caller named it.
  TempDir dir;
  const fs::path file = dir.write("cpu.json", "{");
  const ManifestResult r = load_manifest(file);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].file == file);
  CHECK(r.problems[0].to_string().starts_with(file.string() + ": (document): malformed JSON"));
}

TEST_CASE("parse_manifest from memory matches load_manifest") {
  TempDir dir;
  const std::string text = full_doc().dump();
  const fs::path file = dir.write("m.json", text);
  const ManifestResult a = load_manifest(file);
  const ManifestResult b = parse_manifest(file, text);
  REQUIRE(a.manifest.has_value());
  REQUIRE(b.manifest.has_value());
  CHECK(a.manifest->library == b.manifest->library);
  CHECK(a.manifest->text == b.manifest->text);
  CHECK(a.manifest->kernel_count() == b.manifest->kernel_count());
}
