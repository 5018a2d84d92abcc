// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest validation field by field: a corpus of bad manifests written into a temporary
// directory, each checked for the exact JSON pointer and the key words of the message.
#include "manifest_test_docs.hpp"

#include <string>

using namespace metrale;
using namespace metrale::manifest_test;

TEST_CASE("wrong type for every field") {
  TempDir dir;
  struct Case {
    const char* pointer;  // where the wrong value goes (and where the problem must be)
    Json value;
    std::vector<std::string_view> words;
  };
  const std::string k0 = "/modules/0/kernels/0";
  const std::string p0 = k0 + "/params/0";
  const std::vector<Case> cases = {
      {"/format_version", 1.0, {"expected a version string", "found number 1.0"}},
      {"/backend", 3, {"expected a backend name", "found number 3"}},
      {"/library", true, {"expected a non-empty library path", "found boolean true"}},
      {"/abi_version", "1", {"expected an integer", "found string \"1\""}},
      {"/priority", nullptr, {"expected an integer", "found null"}},
      {"/description", 7, {"expected a string", "found number 7"}},
      {"/library_checksum", Json::array(), {"xxh3-64:", "found an empty array"}},
      {"/targets", "sm_90", {"expected an array of strings", "found string \"sm_90\""}},
      {"/targets/0", 90, {"expected a non-empty string", "found number 90"}},
      {"/modules", Json::object(), {"expected an array of module objects", "found an object"}},
      {"/modules/0", "w4a16", {"expected an object (a module)", "found string"}},
      {"/modules/0/name", 5, {"expected an identifier", "found number 5"}},
      {"/modules/0/source", false, {"expected a non-empty source file name", "found boolean false"}},
      {"/modules/0/kernels", nullptr, {"expected an array of kernel objects", "found null"}},
      {"/modules/0/kernels/0", 3, {"expected an object (a kernel)", "found number 3"}},
      {"/modules/0/kernels/0/name", Json::array({1}), {"expected an identifier", "found an array"}},
      {"/modules/0/kernels/0/params", Json::object(), {"expected an array of parameter objects"}},
      {"/modules/0/kernels/0/params/0", "x", {"expected an object (a parameter", "found string"}},
      {"/modules/0/kernels/0/params/0/name", 1, {"expected an identifier", "found number 1"}},
      {"/modules/0/kernels/0/params/0/type", 7, {"expected one of ptr, u32", "found number 7"}},
      {"/modules/0/kernels/0/min_target", false, {"expected a non-empty string", "boolean false"}},
      {"/modules/0/kernels/0/cpu_features", "avx2", {"expected an array of strings", "\"avx2\""}},
      {"/modules/0/kernels/1/cpu_features/0", "", {"expected a non-empty string", "empty string"}},
      {"/modules/0/kernels/0/weight_layout", Json::object(), {"expected a non-empty string"}},
  };
  Json base = full_doc();
  base["modules"][0]["kernels"][1]["cpu_features"] = Json::array({"avx2"});
  for (const Case& c : cases) {
    CAPTURE(c.pointer);
    const ManifestResult r = load_doc(dir, with(base, c.pointer, c.value));
    INFO("problems:\n", all_problems(r));
    REQUIRE(r.problems.size() == 1);
    CHECK_FALSE(r.manifest.has_value());
    CHECK(r.problems[0].pointer == c.pointer);
    for (std::string_view w : c.words) {
      CAPTURE(w);
      CHECK(r.problems[0].message.find(w) != std::string::npos);
    }
  }
}

TEST_CASE("missing required fields") {
  TempDir dir;
  for (const std::string key : {"format_version", "backend", "library", "abi_version", "priority",
                          "modules"}) {
    CAPTURE(key);
    const ManifestResult r = load_doc(dir, without(full_doc(), std::string("/") + key));
    check_single(r, "", {"missing required key", std::string("\"") + key + "\"", "expected"});
  }
  // Optional keys may go.
  for (const std::string pointer : {"/description", "/library_checksum", "/targets", "/modules/0/source",
                              "/modules/0/kernels/0/min_target",
                              "/modules/0/kernels/0/weight_layout",
                              "/modules/1/kernels/0/cpu_features"}) {
    CAPTURE(pointer);
    const ManifestResult r = load_doc(dir, without(full_doc(), pointer));
    INFO(all_problems(r));
    CHECK(r.manifest.has_value());
  }
  check_single(load_doc(dir, without(full_doc(), "/modules/1/name")), "/modules/1",
               {"missing required key \"name\"", "identifier"});
  check_single(load_doc(dir, without(full_doc(), "/modules/1/kernels")), "/modules/1",
               {"missing required key \"kernels\"", "array of kernel objects"});
  check_single(load_doc(dir, without(full_doc(), "/modules/0/kernels/1/name")),
               "/modules/0/kernels/1", {"missing required key \"name\""});
  check_single(load_doc(dir, without(full_doc(), "/modules/0/kernels/1/params")),
               "/modules/0/kernels/1", {"missing required key \"params\""});
  check_single(load_doc(dir, without(full_doc(), "/modules/0/kernels/0/params/3/type")),
               "/modules/0/kernels/0/params/3",
               {"missing required key \"type\"", "one of ptr, u32, i32, u64, i64, f32, f64"});
  check_single(load_doc(dir, without(full_doc(), "/modules/0/kernels/0/params/3/name")),
               "/modules/0/kernels/0/params/3", {"missing required key \"name\""});
}

TEST_CASE("all problems are collected in one pass, in document order") {
  TempDir dir;
  Json doc = full_doc();
  doc["backend"] = "CUDA";
  doc["priority"] = 5000;
  doc["modules"][1]["kernels"][0]["params"][2]["type"] = "float";
  doc.erase("abi_version");
  const ManifestResult r = load_doc(dir, doc);
  INFO(all_problems(r));
  REQUIRE(r.problems.size() == 4);
  CHECK(r.problems[0].pointer == "/backend");
  CHECK(r.problems[1].pointer == "/priority");
  CHECK(r.problems[2].pointer == "/modules/1/kernels/0/params/2/type");
  CHECK(r.problems[3].pointer == "");
  CHECK(contains_all(r.problems[3].message, {"missing required key \"abi_version\""}));
}

TEST_CASE("unknown format major is skipped with one problem") {
  TempDir dir;
  for (const std::string version : {"2.0", "0.9", "3.14", "99999999999999999999.0"}) {
    CAPTURE(version);
    // Everything else is ignored: a format-2 manifest owes us nothing.
    Json doc = Json{{"format_version", version}, {"backnd", 1}};
    const ManifestResult r = load_doc(dir, doc);
    CHECK(r.skipped_format);
    check_single(r, "/format_version", {"expected major 1", "skipped", version});
  }
}

TEST_CASE("format_version shape") {
  TempDir dir;
  for (const std::string version : {"1", "1.", "01.0", "1.01", "v1.0", " 1.0", "1.0\n", "1.0.0", "", "-1.0"}) {
    CAPTURE(version);
    const ManifestResult r = load_doc(dir, with(minimal_doc(), "/format_version", version));
    CHECK_FALSE(r.skipped_format);
    check_single(r, "/format_version", {"expected a version string \"MAJOR.MINOR\""});
  }
}

TEST_CASE("newer minor: unknown keys at every level are ignored") {
  TempDir dir;
  Json doc = full_doc();
  doc["format_version"] = "1.3";
  doc["future_root"] = {{"anything", true}};
  doc["modules"][0]["future_module"] = 1;
  doc["modules"][0]["kernels"][0]["future_kernel"] = "x";
  doc["modules"][0]["kernels"][0]["params"][0]["future_param"] = nullptr;
  ManifestResult r = load_doc(dir, doc);
  INFO(all_problems(r));
  REQUIRE(r.manifest.has_value());
  CHECK(r.manifest->format_major == 1);
  CHECK(r.manifest->format_minor == 3);
  CHECK(r.manifest->kernel_count() == 4);

  // Known keys keep their rules under a newer minor.
  doc["priority"] = "high";
  check_single(load_doc(dir, doc), "/priority", {"expected an integer", "found string \"high\""});
}

TEST_CASE("unknown key in format 1.0 names the nearest known key") {
  TempDir dir;
  Json doc = without(minimal_doc(), "/priority");
  doc["priorty"] = 10;
  ManifestResult r = load_doc(dir, doc);
  INFO(all_problems(r));
  REQUIRE(r.problems.size() == 2);
  CHECK(has_problem(r, "/priorty", {"unknown key \"priorty\"", "did you mean \"priority\""}));
  CHECK(has_problem(r, "", {"missing required key \"priority\""}));

  doc = full_doc();
  doc["modules"][0]["kernels"][0]["param"] = Json::array();
  check_single(load_doc(dir, doc), "/modules/0/kernels/0/param",
               {"unknown key \"param\"", "1.0", "did you mean \"params\""});

  doc = full_doc();
  doc["modules"][0]["kernels"][0]["params"][0]["tpye"] = "ptr";
  check_single(load_doc(dir, doc), "/modules/0/kernels/0/params/0/tpye",
               {"did you mean \"type\""});

  doc = full_doc();
  doc["modules"][1]["srouce"] = "act.cu";
  check_single(load_doc(dir, doc), "/modules/1/srouce", {"did you mean \"source\""});

  // Nothing close: the known keys are listed instead.
  doc = with(minimal_doc(), "/zzzzzzzzzzzz", 1);
  check_single(load_doc(dir, doc), "/zzzzzzzzzzzz",
               {"unknown key", "known keys here: format_version, backend, library"});

  // JSON pointer escaping of the key (RFC 6901).
  doc = minimal_doc();
  doc["a/b~c"] = 1;
  check_single(load_doc(dir, doc), "/a~1b~0c", {"unknown key \"a/b~c\""});

  // Without a format_version the strict rules apply, so its own typo is caught.
  doc = without(minimal_doc(), "/format_version");
  doc["format_verison"] = "1.0";
  r = load_doc(dir, doc);
  INFO(all_problems(r));
  REQUIRE(r.problems.size() == 2);
  CHECK(has_problem(r, "/format_verison", {"did you mean \"format_version\""}));
  CHECK(has_problem(r, "", {"missing required key \"format_version\""}));
}

TEST_CASE("duplicate module, kernel and parameter names") {
  TempDir dir;
  Json doc = full_doc();
  doc["modules"][1]["name"] = "w4a16";
  check_single(load_doc(dir, doc), "/modules/1/name",
               {"duplicate module name \"w4a16\"", "/modules/0"});

  doc = full_doc();
  doc["modules"][0]["kernels"].push_back({{"name", "w4a16_gemm_t_p3"}, {"params", Json::array()}});
  check_single(load_doc(dir, doc), "/modules/0/kernels/2/name",
               {"duplicate kernel name \"w4a16_gemm_t_p3\"", "/modules/0/kernels/1"});

  doc = full_doc();
  doc["modules"][0]["kernels"][0]["params"][5]["name"] = "m";
  check_single(load_doc(dir, doc), "/modules/0/kernels/0/params/5/name",
               {"duplicate parameter name \"m\"", "/modules/0/kernels/0/params/4"});
}

TEST_CASE("duplicate JSON keys in one object") {
  TempDir dir;
  std::string text = minimal_doc().dump();
  text.insert(1, "\"backend\": \"cuda\", ");
  check_single(load_text(dir, text), "/backend", {"duplicate key \"backend\""});

  text = R"({"format_version": "1.0", "backend": "cpu", "library": "l.so", "abi_version": 1,
    "priority": 1, "modules": [{"name": "m", "kernels": [{"name": "a", "name": "b",
    "params": []}]}]})";
  check_single(load_text(dir, text), "/modules/0/kernels/0/name", {"duplicate key \"name\""});
}

TEST_CASE("param types: bad name, and the name table") {
  TempDir dir;
  Json doc = full_doc();
  doc["modules"][0]["kernels"][0]["params"][1]["type"] = "float";
  check_single(load_doc(dir, doc), "/modules/0/kernels/0/params/1/type",
               {"expected one of ptr, u32, i32, u64, i64, f32, f64", "found string \"float\""});
  doc["modules"][0]["kernels"][0]["params"][1]["type"] = "PTR";
  check_single(load_doc(dir, doc), "/modules/0/kernels/0/params/1/type", {"\"PTR\""});

  for (metrale_param_type t : {METRALE_PARAM_PTR, METRALE_PARAM_U32, METRALE_PARAM_I32,
                               METRALE_PARAM_U64, METRALE_PARAM_I64, METRALE_PARAM_F32,
                               METRALE_PARAM_F64}) {
    const auto back = param_type_from_name(param_type_name(t));
    REQUIRE(back.has_value());
    CHECK(*back == t);
  }
  CHECK(std::string(param_type_name(METRALE_PARAM_F64)) == "f64");
  CHECK_FALSE(param_type_from_name("f16").has_value());
  CHECK_FALSE(param_type_from_name("").has_value());
  CHECK(std::string(param_type_name(static_cast<metrale_param_type>(99))) == "unknown");
}

TEST_CASE("identifiers") {
  TempDir dir;
  for (const std::string bad : {"1abc", "a-b", "x y", "", "name\n", "\xC3\xA9t\xC3\xA9"}) {
    CAPTURE(bad);
    check_single(load_doc(dir, with(full_doc(), "/modules/1/name", bad)), "/modules/1/name",
                 {"expected an identifier ([A-Za-z_][A-Za-z0-9_]*)"});
    check_single(load_doc(dir, with(full_doc(), "/modules/1/kernels/0/name", bad)),
                 "/modules/1/kernels/0/name", {"expected an identifier"});
    check_single(load_doc(dir, with(full_doc(), "/modules/1/kernels/0/params/0/name", bad)),
                 "/modules/1/kernels/0/params/0/name", {"expected an identifier"});
  }
  for (const std::string good : {"_", "_x9", "W4A16", "a_b_c"}) {
    CAPTURE(good);
    const ManifestResult r = load_doc(dir, with(full_doc(), "/modules/1/name", good));
    INFO(all_problems(r));
    CHECK(r.manifest.has_value());
  }
}

TEST_CASE("backend name shape") {
  TempDir dir;
  const std::string longest = "a" + std::string(31, 'z');
  for (const std::string& good : {std::string("c"), std::string("my-vendor_2"), longest}) {
    CAPTURE(good);
    const ManifestResult r = load_doc(dir, with(minimal_doc(), "/backend", good));
    INFO(all_problems(r));
    CHECK(r.manifest.has_value());
  }
  for (const std::string& bad : {std::string("CPU"), std::string("cpu\n"), std::string("9cpu"),
                                 std::string(""), std::string("-cpu"), longest + "z"}) {
    CAPTURE(bad);
    check_single(load_doc(dir, with(minimal_doc(), "/backend", bad)), "/backend",
                 {"expected a backend name"});
  }
  // The hidden newline is visible in the message.
  check_single(load_doc(dir, with(minimal_doc(), "/backend", "cpu\n")), "/backend",
               {"found string \"cpu\\n\""});
}

TEST_CASE("library checksum shape") {
  TempDir dir;
  for (const std::string bad : {"xxh3-64:0123", "xxh3-64:0123456789ABCDEF", "sha256:0123456789abcdef",
                          "xxh3-64:0123456789abcdef0", "xxh3-64:0123456789abcdeg", "",
                          "xxh64:0123456789abcdef"}) {
    CAPTURE(bad);
    check_single(load_doc(dir, with(minimal_doc(), "/library_checksum", bad)),
                 "/library_checksum", {"\"xxh3-64:\" followed by 16 lowercase hex digits"});
  }
}

TEST_CASE("integers: ranges, and integral floats count as integers") {
  TempDir dir;
  auto priority = [&](const Json& v) { return load_doc(dir, with(minimal_doc(), "/priority", v)); };
  CHECK(priority(1000).manifest->priority == 1000);
  CHECK(priority(-1000).manifest->priority == -1000);
  CHECK(priority(3.0).manifest->priority == 3);
  CHECK(priority(-0.0).manifest->priority == 0);
  check_single(priority(1001), "/priority", {"expected an integer from -1000 to 1000", "1001"});
  check_single(priority(-1001), "/priority", {"from -1000 to 1000"});
  check_single(priority(2.5), "/priority", {"expected an integer", "found number 2.5"});
  check_single(priority(true), "/priority", {"expected an integer", "found boolean true"});
  check_single(priority(18446744073709551615ull), "/priority", {"from -1000 to 1000"});
  check_single(priority(1e30), "/priority", {"from -1000 to 1000"});

  auto abi = [&](const Json& v) { return load_doc(dir, with(minimal_doc(), "/abi_version", v)); };
  CHECK(abi(4294967295ull).manifest->abi_version == 4294967295u);
  check_single(abi(0), "/abi_version", {"expected an integer from 1 to 4294967295", "found number 0"});
  check_single(abi(-1), "/abi_version", {"from 1 to 4294967295"});
  check_single(abi(4294967296ull), "/abi_version", {"from 1 to 4294967295"});
}

TEST_CASE("module source: relative, no '..', not absolute") {
  TempDir dir;
  const ManifestResult ok = load_doc(dir, with(full_doc(), "/modules/0/source", "sub/w4a16.cu"));
  INFO(all_problems(ok));
  REQUIRE(ok.manifest.has_value());
  CHECK(ok.manifest->modules[0].source == "sub/w4a16.cu");
  for (const std::string bad : {"/abs/w4a16.cu", "../w4a16.cu", "sub/../../x.cu", ".."}) {
    CAPTURE(bad);
    check_single(load_doc(dir, with(full_doc(), "/modules/0/source", bad)), "/modules/0/source",
                 {"relative to a kernel source directory", "not absolute", "\"..\""});
  }
  check_single(load_doc(dir, with(full_doc(), "/modules/0/source", "")), "/modules/0/source",
               {"expected a non-empty source file name"});
}
