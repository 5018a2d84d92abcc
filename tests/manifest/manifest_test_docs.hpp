// SPDX-License-Identifier: MIT OR Apache-2.0
// What the manifest tests share: a temporary directory, a minimal and a full manifest document,
// loading a document through the file system, and checks on the problems a load reports.
#pragma once

#include <doctest/doctest.h>

#include <metrale/manifest.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unistd.h>

namespace metrale::manifest_test {

namespace fs = std::filesystem;

using Json = nlohmann::ordered_json;

// A fresh directory per test case, removed at the end (as the Vulkan loader's tests do with
// their generated manifests).
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "metrale-manifest-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = fs::absolute(pattern).lexically_normal();  // what Manifest::path is compared to
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

  fs::path write(const fs::path& name, const std::string& text) const {
    const fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + file.string());
    return file;
  }

 private:
  fs::path path_;
};

inline Json minimal_doc() {
  return Json::parse(R"json({
    "format_version": "1.0",
    "backend": "cpu",
    "library": "libmetrale_cpu.so",
    "abi_version": 1,
    "priority": 10,
    "modules": []
  })json");
}

inline Json full_doc() {
  return Json::parse(R"json({
    "format_version": "1.0",
    "backend": "cuda",
    "library": "plugins/./libmetrale_cuda.so",
    "abi_version": 1,
    "priority": 100,
    "description": "CUDA backend (Driver API + NVRTC)",
    "library_checksum": "xxh3-64:0123456789abcdef",
    "targets": ["sm_80", "sm_90"],
    "modules": [
      { "name": "w4a16", "source": "w4a16.cu",
        "kernels": [
          { "name": "w4a16_gemm_t",
            "params": [ {"name": "x", "type": "ptr"}, {"name": "qweight", "type": "ptr"},
                        {"name": "scales", "type": "ptr"}, {"name": "y", "type": "ptr"},
                        {"name": "m", "type": "u32"}, {"name": "n", "type": "u32"},
                        {"name": "k", "type": "u32"} ],
            "min_target": "sm_80",
            "weight_layout": "w4a16-nk-g128" },
          { "name": "w4a16_gemm_t_p3", "params": [], "min_target": "sm_90" }
        ] },
      { "name": "act",
        "kernels": [
          { "name": "silu_mul",
            "params": [ {"name": "a", "type": "i32"}, {"name": "b", "type": "u64"},
                        {"name": "c", "type": "i64"}, {"name": "d", "type": "f32"},
                        {"name": "e", "type": "f64"} ],
            "cpu_features": ["avx2", "fma"] },
          { "name": "w4a16_gemm_t", "params": [] }
        ] }
    ]
  })json");
}

// Writes doc into dir as manifest.json and loads it back through the file system.
inline ManifestResult load_doc(const TempDir& dir, const Json& doc) {
  return load_manifest(dir.write("manifest.json", doc.dump(2)));
}

inline ManifestResult load_text(const TempDir& dir, const std::string& text) {
  return load_manifest(dir.write("manifest.json", text));
}

inline std::string all_problems(const ManifestResult& r) {
  std::string out;
  for (const ManifestProblem& p : r.problems) out += p.to_string() + "\n";
  return out.empty() ? std::string("(no problems)") : out;
}

inline bool contains_all(const std::string& text, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (text.find(w) == std::string::npos) return false;
  }
  return true;
}

// The result is rejected with exactly one problem, at `pointer`, whose message holds every word.
inline void check_single(const ManifestResult& r, std::string_view pointer,
                  std::initializer_list<std::string_view> words) {
  INFO("problems:\n", all_problems(r));
  CHECK_FALSE(r.manifest.has_value());
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].pointer == pointer);
  CHECK(contains_all(r.problems[0].message, words));
}

// Some problem (among others) sits at `pointer` and holds every word.
inline bool has_problem(const ManifestResult& r, std::string_view pointer,
                 std::initializer_list<std::string_view> words) {
  for (const ManifestProblem& p : r.problems) {
    if (p.pointer == pointer && contains_all(p.message, words)) return true;
  }
  return false;
}

// Replaces (or, with a null `value` and erase=true, removes) the value at `pointer`.
inline Json with(Json doc, const std::string& pointer, const Json& value) {
  doc[Json::json_pointer(pointer)] = value;
  return doc;
}

inline Json without(Json doc, const std::string& pointer) {
  const Json::json_pointer p(pointer);
  doc[p.parent_pointer()].erase(p.back());
  return doc;
}

}  // namespace metrale::manifest_test
