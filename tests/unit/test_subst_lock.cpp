// SPDX-License-Identifier: MIT OR Apache-2.0
// METRALE_KERNEL_SUBST, locks and audit diffs.
#include <doctest/doctest.h>

#include <layers/linear/selectors.hpp>
#include <metrale/lock.hpp>
#include <metrale/registry.hpp>

#include "test_support.hpp"

#include <sys/stat.h>

using namespace metrale;
using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {

struct Vendor {
  TempDir dir;
  Registry registry;
  std::shared_ptr<Backend> backend;
  explicit Vendor(std::vector<std::string> w4a16 = {"w4a16_gemm_t", "w4a16_gemm_t_k64"}) {
    auto odd = nlohmann::json::array({{{"name", "odd_gemm"}, {"params", {{{"name", "x"}, {"type", "ptr"}}}}}});
    registry = discover_manifest(dir, manifest_json("fault", fault_plugin("good"), 1,
                                                    {{"w4a16", w4a16_kernels(w4a16)},
                                                     {"vendor", w4a16_kernels({"fast_gemm"})},
                                                     {"odd", odd}}));
    backend = registry.find("fault");
    REQUIRE(backend);
  }
};

}  // namespace

TEST_CASE("METRALE_KERNEL_SUBST: the substitute serves the request, visibly") {
  Vendor v;
  EnvGuard env({{"METRALE_KERNEL_SUBST", "w4a16/w4a16_gemm_t=vendor/fast_gemm"}});
  auto handle = layers::tgemm_kernel(*v.backend);
  CHECK(v.backend->kernel_name(handle) == "vendor/fast_gemm");
  auto row = v.backend->audit().snapshot().back();
  CHECK(row.kernel == "w4a16_gemm_t");
  CHECK(row.substitute == "vendor/fast_gemm");
  CHECK(row.reason.find("substituted by vendor/fast_gemm") != std::string::npos);
  CHECK(row.lever.find("METRALE_KERNEL_SUBST=w4a16/w4a16_gemm_t=vendor/fast_gemm") != std::string::npos);
  CHECK(render_audit_table({row}).find("w4a16/w4a16_gemm_t -> vendor/fast_gemm") != std::string::npos);
}

TEST_CASE("METRALE_KERNEL_SUBST: a substitute that is missing or differs in parameters is refused") {
  Vendor v;
  {
    EnvGuard env({{"METRALE_KERNEL_SUBST", "w4a16/w4a16_gemm_t=odd/odd_gemm"}});
    CHECK_THROWS_WITH_AS(v.backend->try_kernel("w4a16", "w4a16_gemm_t"),
                         doctest::Contains("substitute odd/odd_gemm declares (ptr) but w4a16/w4a16_gemm_t takes"),
                         Refusal);
    CHECK(v.backend->audit().snapshot().back().outcome == LookupOutcome::refused);
  }
  {
    EnvGuard env({{"METRALE_KERNEL_SUBST", "w4a16/w4a16_gemm_t=vendor/nosuch"}});
    CHECK_THROWS_WITH_AS(v.backend->try_kernel("w4a16", "w4a16_gemm_t"),
                         doctest::Contains("METRALE_KERNEL_SUBST maps w4a16/w4a16_gemm_t to vendor/nosuch"), Refusal);
  }
  {
    EnvGuard env({{"METRALE_KERNEL_SUBST", "w4a16/w4a16_gemm_t"}});
    CHECK_THROWS_WITH_AS(validate_levers(), doctest::Contains("module/name=module/name"), Refusal);
  }
}

TEST_CASE("locks: unchanged configuration passes, a changed one lists each differing site") {
  Vendor gpu_like({"w4a16_gemm_t", "w4a16_gemm_t_p3", "w4a16_gemm_t_k64"});
  // One builder, run twice: the sites (file:line) are the same both times, as in a real binary.
  auto build = [&] {
    layers::tgemm_kernel(*gpu_like.backend);
    layers::k64_kernel(*gpu_like.backend);
  };
  build();
  auto lock = make_lock(*gpu_like.backend, gpu_like.backend->audit().snapshot());
  CHECK(lock["rows"].size() == 3);  // tgemm p3, k64 p3 (null), k64 plain
  CHECK(lock_differences(lock, lock).empty());
  CHECK(lock["rows"][0]["library_checksum"].get<std::string>().starts_with("xxh3-64:"));

  // The same sites under a lever: p3 is no longer looked up.
  gpu_like.backend->audit().clear();
  {
    EnvGuard env({{"METRALE_NO_TGEMM_PIPELINE3", "1"}});
    build();
  }
  auto differences = lock_differences(lock, make_lock(*gpu_like.backend, gpu_like.backend->audit().snapshot()));
  for (const auto& line : differences) MESSAGE(line);
  REQUIRE(differences.size() == 2);
  // p3 was resolved in the lock and is not looked up now; the plain kernel is new at that site.
  CHECK(differences[0].find("w4a16/w4a16_gemm_t_p3: in the lock only (resolved: w4a16/w4a16_gemm_t_p3)") !=
        std::string::npos);
  CHECK(differences[1].find("w4a16/w4a16_gemm_t: in the current configuration only") != std::string::npos);

  TempDir dir;
  write_file(dir / "lock.json", lock.dump());
  EnvGuard env({{"METRALE_LOCK", (dir / "lock.json").string()}});
  CHECK_THROWS_WITH_AS(enforce_lock(*gpu_like.backend, gpu_like.backend->audit().snapshot()),
                       doctest::Contains("2 resolution(s) differ from the lock"), Refusal);
  write_file(dir / "lock.json", "{not json");
  CHECK_THROWS_WITH_AS(enforce_lock(*gpu_like.backend, {}), doctest::Contains("not a lock file"), Refusal);
}

TEST_CASE("diff_audits compares two targets' audits by site") {
  Vendor a({"w4a16_gemm_t", "w4a16_gemm_t_p3", "w4a16_gemm_t_k64"});
  Vendor b({"w4a16_gemm_t", "w4a16_gemm_t_k64"});
  auto site = std::source_location::current();
  layers::tgemm_kernel(*a.backend, site);
  layers::tgemm_kernel(*b.backend, site);
  auto audit_a = nlohmann::json::parse(render_audit_json(a.backend->audit().snapshot()));
  auto audit_b = nlohmann::json::parse(render_audit_json(b.backend->audit().snapshot()));
  auto lines = diff_audits(audit_a, audit_b);
  for (const auto& line : lines) MESSAGE(line);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("w4a16/w4a16_gemm_t_p3: resolved \"w4a16/w4a16_gemm_t_p3\" -> \"null\"") != std::string::npos);
  CHECK(lines[1].find("w4a16/w4a16_gemm_t: in the second only") != std::string::npos);
  CHECK(diff_audits(audit_a, audit_a).empty());
}

TEST_CASE("a lock file that is not a regular file, too large, or malformed is a refusal naming it") {
  Vendor v;
  layers::tgemm_kernel(*v.backend);
  const auto rows = v.backend->audit().snapshot();
  const nlohmann::json good = make_lock(*v.backend, rows);
  TempDir dir;
  const fs::path file = dir / "lock.json";
  EnvGuard env({{"METRALE_LOCK", file.string()}});
  auto refusal = [&] {
    try {
      enforce_lock(*v.backend, rows);
    } catch (const Refusal& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return "not a refusal: " + std::string(e.what());
    }
    return std::string("(no refusal)");
  };
  auto refused_with = [&](const std::string& text, std::initializer_list<std::string> words) {
    write_file(file, text);
    const std::string e = refusal();
    CAPTURE(e);
    CHECK(e.find("METRALE_LOCK=" + file.string()) != std::string::npos);
    for (const auto& w : words) CHECK(e.find(w) != std::string::npos);
  };
  write_file(file, good.dump());
  CHECK(refusal() == "(no refusal)");

  auto with = [&](const char* pointer, nlohmann::json value) {
    nlohmann::json lock = good;
    lock[nlohmann::json::json_pointer(pointer)] = std::move(value);
    return lock.dump();
  };
  refused_with(with("/lock_format", 1.9), {"/lock_format", "the integer 1", "1.9"});
  refused_with(with("/lock_format", 1e300), {"/lock_format", "the integer 1"});
  refused_with(with("/lock_format", "1"), {"/lock_format", "the integer 1"});
  refused_with(with("/lock_format", 2), {"/lock_format", "the integer 1", "2"});
  refused_with(with("/rows", nlohmann::json::array({{{"x", 1}}})), {"/rows/0", "site"});
  refused_with(with("/rows/0/site/line", 1e300), {"/rows/0/site/line"});
  refused_with(with("/rows/0/outcome", 7), {"/rows/0/outcome", "string"});
  refused_with(with("/rows", "none"), {"/rows", "array"});
  refused_with(with("/lock_format_minor", -1), {"/lock_format_minor", "non-negative integer", "-1"});
  refused_with(with("/rows/0/tier", 3), {"/rows/0/tier", "string"});
  refused_with(with("/rows/0/annotations", "tier=x"), {"/rows/0/annotations", "object"});
  refused_with(with("/rows/0/annotations", {{"tier", 3}}), {"/rows/0/annotations/tier", "string"});
  refused_with(with("/rows/0/pinned", {{"tier", true}}), {"/rows/0/pinned", "array"});
  refused_with(with("/rows/0/pinned", nlohmann::json::array({3})), {"/rows/0/pinned/0", "string"});
  write_file(file, with("/lock_format_minor", 7));  // a later compatible addition still reads
  CHECK(refusal() == "(no refusal)");
  refused_with(R"({"lock_format": 1e999})", {"line 1"});
  refused_with(std::string(17u << 20, ' ') + good.dump(), {"16 MiB"});

  fs::remove(file);
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
  const std::string e = refusal();
  CHECK(e.find(file.string()) != std::string::npos);
  CHECK(e.find("FIFO") != std::string::npos);
}

TEST_CASE("diff_audits refuses malformed documents with the field that is wrong") {
  nlohmann::json bad = nlohmann::json::array({{{"site", {{"file", "f"}, {"line", -1}, {"function", "g"}}}}});
  CHECK_THROWS_WITH_AS(diff_audits(bad, bad), doctest::Contains("/0/site/line"), Error);
}
