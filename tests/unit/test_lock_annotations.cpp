// SPDX-License-Identifier: MIT OR Apache-2.0
// Annotations in locks and audit diffs: a lock writes each row's pinned annotations and compares
// them as opaque key/value pairs; older lock minors are read as docs/quantization.md ("Audit and locks") says.
#include <doctest/doctest.h>

#include <metrale/lock.hpp>
#include <metrale/registry.hpp>

#include "test_support.hpp"

using namespace metrale;
using namespace metrale::testing;

namespace {

// Two lookup sites, as a layer's: one annotates its lookups, the other does not.
std::source_location annotating_site() { return std::source_location::current(); }
std::source_location plain_site() { return std::source_location::current(); }

// A backend whose w4a16 kernels are looked up from both sites.
struct Annotated {
  TempDir dir;
  Registry registry;
  std::shared_ptr<Backend> backend;

  Annotated() {
    registry = discover_manifest(dir, manifest_json("fault", fault_plugin("good"), 1,
                                                    {{"w4a16", w4a16_kernels({"w4a16_gemm_t", "w4a16_gemm_t_k64"})}}));
    backend = registry.find("fault");
    REQUIRE(backend);
  }
  // The rows of one build: the site's lookup under these annotations, then the other site's.
  std::vector<AuditRow> build(std::vector<AuditAnnotation> annotations) {
    backend->audit().clear();
    Backend::LookupRequest request;
    request.annotations = std::move(annotations);
    backend->lookup("w4a16", "w4a16_gemm_t", request, annotating_site());
    backend->try_kernel("w4a16", "w4a16_gemm_t_k64", plain_site());
    return backend->audit().snapshot();
  }
  std::vector<AuditRow> tiered(const std::string& tier, const std::string& note = "as asked") {
    return build({{"tier", tier, true}, {"tier_note", note, false}});
  }
  nlohmann::json lock_of(const std::vector<AuditRow>& rows) const { return make_lock(*backend, rows); }
  std::string location() const { return Site::from(annotating_site()).to_string(); }
};

// A lock as an older minor wrote it: 1 with each row's "tier" (the default on rows without one),
// 0 with neither.
nlohmann::json older(nlohmann::json lock, int minor) {
  if (minor == 0) lock.erase("lock_format_minor");
  else lock["lock_format_minor"] = minor;
  for (auto& row : lock["rows"]) {
    const auto annotations = row["annotations"];
    row.erase("annotations");
    if (minor == 1) row["tier"] = annotations.value("tier", std::string("bf16/w4a16"));
  }
  return lock;
}

}  // namespace

TEST_CASE("a lock writes each row's pinned annotations, and only those") {
  Annotated a;
  const auto lock = a.lock_of(a.tiered("bf16/w4a16"));
  CHECK(lock["lock_format_minor"] == 2);
  REQUIRE(lock["rows"].size() == 2);
  CHECK(lock["rows"][0]["annotations"] == nlohmann::json{{"tier", "bf16/w4a16"}});
  CHECK_FALSE(lock["rows"][0].contains("pinned"));
  CHECK_FALSE(lock["rows"][0].contains("tier"));
  CHECK(lock["rows"][1]["annotations"] == nlohmann::json::object());
  CHECK(lock_differences(lock, lock).empty());
  CHECK_NOTHROW(parse_lock(lock.dump(), "lock.json"));
}

TEST_CASE("a changed pinned annotation is a difference naming location, key and both values; an unpinned one is not") {
  Annotated a;
  const auto lock = a.lock_of(a.tiered("bf16/w4a16", "w4a16: bf16 activations (default)"));
  CHECK(lock_differences(lock, a.lock_of(a.tiered("bf16/w4a16", "another note"))).empty());

  const auto now = a.tiered("int8/w4a8");
  const auto lines = lock_differences(lock, a.lock_of(now));
  REQUIRE(lines.size() == 1);
  const std::string line = a.location() + ": annotation tier bf16/w4a16 in the lock, int8/w4a8 in the current configuration";
  CHECK(lines[0] == line);

  TempDir dir;
  write_file(dir / "lock.json", lock.dump());
  EnvGuard env({{"METRALE_LOCK", (dir / "lock.json").string()}});
  const std::string refusal = "1 resolution(s) differ from the lock:\n  " + line;
  CHECK_THROWS_WITH_AS(enforce_lock(*a.backend, now), doctest::Contains(refusal.c_str()), Refusal);
  CHECK_NOTHROW(enforce_lock(*a.backend, a.tiered("bf16/w4a16")));

  // A pinned annotation on one side only is a difference too.
  const auto gone = lock_differences(lock, a.lock_of(a.build({})));
  REQUIRE(gone.size() == 1);
  CHECK(gone[0] == a.location() + ": annotation tier bf16/w4a16 in the lock, none in the current configuration");
  const auto added = lock_differences(a.lock_of(a.build({})), lock);
  REQUIRE(added.size() == 1);
  CHECK(added[0] == a.location() + ": annotation tier none in the lock, bf16/w4a16 in the current configuration");
}

TEST_CASE("a minor-1 lock's tier is the pinned annotation tier, compared where the current rows carry one") {
  Annotated a;
  const auto lock = older(a.lock_of(a.tiered("int8/w4a8")), 1);
  CHECK(lock["rows"][1]["tier"] == "bf16/w4a16");  // the default a minor-1 lock wrote on unannotated rows
  CHECK_NOTHROW(parse_lock(lock.dump(), "lock.json"));
  CHECK(lock_differences(lock, a.lock_of(a.tiered("int8/w4a8"))).empty());
  const auto lines = lock_differences(lock, a.lock_of(a.tiered("bf16/w4a16")));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == a.location() + ": annotation tier int8/w4a8 in the lock, bf16/w4a16 in the current configuration");
  // The other site annotates nothing now: its minor-1 tier is not compared.
  CHECK(lock_differences(lock, a.lock_of(a.build({}))).empty());
}

TEST_CASE("a minor-0 lock carries no annotations and none are compared") {
  Annotated a;
  const auto lock = older(a.lock_of(a.tiered("bf16/w4a16")), 0);
  CHECK_FALSE(lock.contains("lock_format_minor"));
  CHECK_NOTHROW(parse_lock(lock.dump(), "lock.json"));
  CHECK(lock_differences(lock, a.lock_of(a.tiered("int8/w4a8"))).empty());
}

TEST_CASE("diff_audits compares the annotations an audit marks pinned") {
  Annotated a;
  auto audit = [](const std::vector<AuditRow>& rows) { return nlohmann::json::parse(render_audit_json(rows)); };
  const auto before = audit(a.build({{"tier", "bf16/w4a16", true}, {"source", "default", false}}));
  CHECK(diff_audits(before, audit(a.build({{"tier", "bf16/w4a16", true}, {"source", "the flag", false}}))).empty());
  const auto lines = diff_audits(before, audit(a.build({{"tier", "int8/w4a8", true}, {"source", "default", false}})));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == a.location() + ": annotation tier bf16/w4a16 in the first, int8/w4a8 in the second");
  // Against a lock of the same build: the lock's annotations are its pinned ones.
  CHECK(diff_audits(a.lock_of(a.build({{"tier", "bf16/w4a16", true}, {"source", "x", false}})), before).empty());
}
