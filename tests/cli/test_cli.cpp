// SPDX-License-Identifier: MIT OR Apache-2.0
// The metrale binary, run as a user would: exit codes, messages, JSON alone on stdout.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "test_support.hpp"

#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <sstream>

using namespace metrale::testing;
namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs metrale with every METRALE_* lever of the caller's shell removed and `env` added; with
// `limit_s`, under timeout(1), which kills a run that hangs (exit code 124).
Result run(const std::string& args, const std::vector<std::pair<std::string, std::string>>& env = {},
           unsigned limit_s = 0) {
  TempDir dir;
  std::string command = "env";
  for (char** e = environ; *e; ++e) {
    std::string_view var(*e);
    if (var.starts_with("METRALE_")) command += " -u " + std::string(var.substr(0, var.find('=')));
  }
  for (const auto& [name, value] : env) command += " " + name + "=" + quote(value);
  if (limit_s != 0) command += " timeout -k 5 " + std::to_string(limit_s);
  command += std::string(" ") + quote(METRALE_EXE) + " " + args + " >" + quote((dir / "out").string()) + " 2>" +
             quote((dir / "err").string()) + " </dev/null";
  int status = std::system(command.c_str());
  Result result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = slurp(dir / "out");
  result.err = slurp(dir / "err");
  return result;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("metrale list shows the CPU backend with its target and kernel count") {
  auto r = run("list");
  CHECK(r.code == 0);
  CHECK(has(r.out, "*cpu"));
  CHECK(has(r.out, "loaded"));
  CHECK(has(r.out, "cpu-x86_64-"));
  CHECK(has(r.out, "usable"));
  auto j = run("list --json");
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.out);  // JSON alone on stdout
  REQUIRE(json.is_array());
  auto cpu = std::find_if(json.begin(), json.end(), [](const auto& e) { return e["backend"] == "cpu"; });
  REQUIRE(cpu != json.end());
  CHECK((*cpu)["state"] == "loaded");
  CHECK((*cpu)["selected"] == true);
  CHECK((*cpu)["kernels"]["usable"].get<int>() > 0);
  CHECK((*cpu)["target"].get<std::string>().starts_with("cpu-x86_64-"));
}

TEST_CASE("metrale audit: a row per lookup with its site, and the visible p3 fallback") {
  auto r = run("audit");
  CHECK(r.code == 0);
  CHECK(has(r.out, "layers/linear/selectors.cpp") == false);  // the site is the caller, not the selector
  CHECK(has(r.out, "cli/cmd_audit.cpp:"));
  auto j = run("audit --json");
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.out);
  auto rows = json["rows"];
  REQUIRE(rows.size() >= 4);
  // tgemm: p3 missing on CPU -> null, then the plain kernel resolved.
  auto p3 = std::find_if(rows.begin(), rows.end(), [](const auto& row) { return row["kernel"] == "w4a16_gemm_t_p3"; });
  REQUIRE(p3 != rows.end());
  CHECK((*p3)["outcome"] == "null");
  CHECK(has((*p3)["reason"].get<std::string>(), "not in manifest"));
  auto plain = std::next(p3);
  REQUIRE(plain != rows.end());
  CHECK((*plain)["kernel"] == "w4a16_gemm_t");
  CHECK((*plain)["outcome"] == "resolved");
  CHECK(json["w4a16_k64_min_k"] == 6144);
  CHECK(json["dropped_rows"] == 0);
}

TEST_CASE("levers steer the audit visibly") {
  auto j = run("audit --json", {{"METRALE_NO_TGEMM_PIPELINE3", "0"}, {"METRALE_W4A16_K64_MIN_K", "4096"}});
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.out);
  CHECK(json["w4a16_k64_min_k"] == 4096);
  for (const auto& row : json["rows"]) CHECK(row["kernel"] != "w4a16_gemm_t_p3");
  bool noted = false;
  for (const auto& row : json["rows"])
    noted = noted || (row["lever"].is_string() && row["lever"] == "METRALE_NO_TGEMM_PIPELINE3=0");
  CHECK(noted);
}

TEST_CASE("refusals exit 3 with a message naming what was asked for") {
  auto v2 = run("audit", {{"METRALE_W4A16_VARIANT", "v2"}});
  CHECK(v2.code == 3);
  CHECK(has(v2.err, "METRALE_W4A16_VARIANT=v2"));
  CHECK(has(v2.err, "w4a16_gemm_t_m128_v2"));
  CHECK(has(v2.err, "backend cpu"));
  CHECK(has(v2.out, "refused"));  // the row is printed before the refusal

  auto nosuch = run("audit", {{"METRALE_BACKEND", "nosuch"}});
  CHECK(nosuch.code == 3);
  CHECK(has(nosuch.err, "nosuch"));
  CHECK(has(nosuch.err, "Backends: cpu ("));

  auto bad = run("audit", {{"METRALE_W4A16_K64_MIN_K", "abc"}});
  CHECK(bad.code == 3);
  CHECK(has(bad.err, "METRALE_W4A16_K64_MIN_K=\"abc\""));
}

TEST_CASE("METRALE_BACKEND naming a backend that is not loaded: exit 3 on every command, with the real cause") {
  // A typo: refused by every command, even those that load nothing, with "did you mean".
  for (const char* command : {"list", "list --json", "kernels", "levers", "audit", "conformance --list",
                              "check-manifest " CPU_MANIFEST}) {
    CAPTURE(command);
    auto typo = run(command, {{"METRALE_BACKEND", "cpuu"}});
    CHECK(typo.code == 3);
    CHECK(has(typo.err, "METRALE_BACKEND=cpuu: backend 'cpuu' cannot be used (no manifest names it; did you mean 'cpu'?)"));
    if (has(command, "--json")) {
      // With --json the refusal is also one JSON object on stdout, and nothing else is.
      const auto doc = nlohmann::json::parse(typo.out, nullptr, false);
      REQUIRE(doc.is_object());
      CHECK(doc.value("exit", 0) == 3);
      CHECK(has(doc.value("error", std::string()), "backend 'cpuu' cannot be used"));
    } else {
      CHECK(typo.out.empty());
    }
  }
  // Disabled: says by what.
  auto off = run("list", {{"METRALE_BACKEND", "cpu"}, {"METRALE_BACKENDS_DISABLE", "c?u"}});
  CHECK(off.code == 3);
  CHECK(has(off.err, "backend 'cpu' cannot be used (disabled by METRALE_BACKENDS_DISABLE=c?u)"));
  // An invalid manifest: its validation problem, not "no manifest names it".
  TempDir dir;
  auto manifest = nlohmann::json::parse(slurp(CPU_MANIFEST));
  manifest["priorty"] = manifest["priority"];
  manifest.erase("priority");
  manifest["library"] = (fs::path(CPU_MANIFEST).parent_path() / manifest["library"].get<std::string>()).string();
  const fs::path broken = write_file(dir / "cpu.json", manifest.dump());
  auto invalid = run("list", {{"METRALE_BACKEND", "cpu"}, {"METRALE_MANIFESTS", broken.string()}});
  CHECK(invalid.code == 3);
  CHECK(has(invalid.err, "backend 'cpu' cannot be used (its manifest " + broken.string() + " is invalid: "));
  CHECK(has(invalid.err, "unknown key \"priorty\""));
  // create() fails: its message. (Known only once the plugin is loaded: every command that
  // loads refuses.)
  const fs::path failing = write_file(dir / "fault.json", manifest_json("fault", fault_plugin("create_fails"), 1, {}).dump());
  auto failed = run("list", {{"METRALE_BACKEND", "fault"}, {"METRALE_MANIFESTS", failing.string() + ":" + CPU_MANIFEST}});
  CHECK(failed.code == 3);
  CHECK(has(failed.err, "backend 'fault' cannot be used (failed: create() failed (internal): fault plugin: create() fails on purpose"));
  // A backend that loaded is selected as before.
  CHECK(run("list", {{"METRALE_BACKEND", "cpu"}}).code == 0);
}

TEST_CASE("a manifest that is a FIFO is refused at once as not a regular file; the other manifests still load") {
  // Opening a FIFO to read waits for a writer, and none comes: a run that opens it hangs, and
  // timeout(1) ends it with 124.
  TempDir dir;
  const fs::path fifo = dir / "fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto r = run("list", {{"METRALE_MANIFESTS", fifo.string() + ":" + CPU_MANIFEST}}, 10);
  CHECK(r.code == 0);
  const std::string said = r.out + r.err;
  CHECK_MESSAGE(has(said, fifo.string() + ": (document): cannot read the manifest: it is a FIFO (named pipe), not a regular file"),
                said);
  CHECK(has(r.out, "*cpu"));
  CHECK(has(r.out, "loaded"));
}

TEST_CASE("METRALE_CPU_THREADS and METRALE_CPU_PIN reach the CPU backend as options threads and pin") {
  // The backend's debug line reports what create() was given: "..., 2 threads, pinned".
  auto pinned = run("list", {{"METRALE_LOG", "debug"}, {"METRALE_CPU_THREADS", "2"}, {"METRALE_CPU_PIN", "1"}});
  CHECK(pinned.code == 0);
  INFO(pinned.err);
  CHECK(has(pinned.err, "2 threads, pinned\n"));  // not "pinned 0 of 1 workers"
  for (const char* pin : {"0", ""}) {
    std::vector<std::pair<std::string, std::string>> env{{"METRALE_LOG", "debug"}, {"METRALE_CPU_THREADS", "2"}};
    if (*pin) env.emplace_back("METRALE_CPU_PIN", pin);
    auto plain = run("list", env);
    CHECK(plain.code == 0);
    INFO(plain.err);
    CHECK(has(plain.err, "2 threads"));
    CHECK_FALSE(has(plain.err, "pinned"));
  }
  for (const char* bad : {"yes", "2", "on", ""}) {
    auto refused = run("list", {{"METRALE_CPU_PIN", bad}});
    INFO("METRALE_CPU_PIN='" << bad << "': " << refused.err);
    CHECK(refused.code == 3);
    CHECK(has(refused.err, "METRALE_CPU_PIN=\"" + std::string(bad) + "\" is not valid: expected 0 or 1"));
  }
}

TEST_CASE("usage errors exit 2; unknown levers are warned about with the nearest name") {
  CHECK(run("--no-such-flag").code == 2);
  CHECK(run("no-such-command").code == 2);
  auto r = run("levers", {{"METRALE_NO_K64_N46", "1"}});
  CHECK(r.code == 0);
  CHECK(has(r.err, "unknown lever METRALE_NO_K64_N46 (did you mean METRALE_NO_K64_N64?)"));
  auto j = run("levers --json");
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.out);
  CHECK(json["levers"].size() >= 18);
}

TEST_CASE("check-manifest: ok for the CPU manifest, one line per problem otherwise") {
  TempDir dir;
  auto bad = write_file(dir / "bad.json", R"({"format_version": "1.0", "backend": 7})");
  auto r = run("check-manifest " + quote(CPU_MANIFEST) + " " + quote(bad.string()));
  CHECK(r.code == 1);
  CHECK(has(r.out, "cpu.json: ok"));
  CHECK(has(r.out, "bad.json: /backend:"));
  auto good = run("check-manifest " + quote(CPU_MANIFEST));
  CHECK(good.code == 0);
}

TEST_CASE("kernels --json lists listed/provided/gated per backend") {
  auto j = run("kernels --json");
  REQUIRE(j.code == 0);
  auto json = nlohmann::json::parse(j.out);
  auto cpu = std::find_if(json.begin(), json.end(), [](const auto& e) { return e["backend"] == "cpu"; });
  REQUIRE(cpu != json.end());
  bool gemm = false;
  for (const auto& k : (*cpu)["kernels"])
    gemm = gemm || (k["name"] == "w4a16_gemm_t" && k["listed"] == true && k["provided"] == true && k["gated"] == false);
  CHECK(gemm);
}

TEST_CASE("docs/levers.md documents every declared lever, under who declares it") {
  auto j = run("levers --json");
  REQUIRE(j.code == 0);
  std::string doc = slurp(fs::path(METRALE_SOURCE_ROOT) / "docs" / "levers.md");
  REQUIRE_FALSE(doc.empty());
  // The text of the "## Declared by ..." section that starts with `heading`.
  auto section = [&](const std::string& heading) {
    size_t start = doc.find("\n## " + heading);
    REQUIRE_MESSAGE(start != std::string::npos, heading);
    size_t end = doc.find("\n## ", start + 1);
    return doc.substr(start, end == std::string::npos ? std::string::npos : end - start);
  };
  auto json = nlohmann::json::parse(j.out);
  for (const auto& lever : json["levers"]) {
    std::string name = lever["name"];
    std::string by = lever["declared_by"];
    std::string heading = by == "runtime" ? "Declared by the runtime"
                          : by == "layers" ? "Declared by the layers"
                                           : "Declared by the backends' manifests";
    CHECK_MESSAGE(has(section(heading), "`" + name + "`"),
                  name << " (declared by " << by << ") is missing from docs/levers.md, " << heading);
  }
}

TEST_CASE("levers: the runtime's, the layers' and each manifest's, with who declares them") {
  auto j = run("levers --json", {{"METRALE_BACKENDS_DISABLE", "cpu"}, {"METRALE_CPU_THREADS", "2"}});
  REQUIRE(j.code == 0);
  CHECK_FALSE(has(j.err, "unknown lever"));  // a disabled backend's levers are still known
  std::map<std::string, nlohmann::json> levers;
  const auto doc = nlohmann::json::parse(j.out);
  for (const auto& lever : doc.at("levers")) levers.emplace(lever.at("name").get<std::string>(), lever);
  CHECK(levers.at("METRALE_BACKEND")["declared_by"] == "runtime");
  CHECK(levers.at("METRALE_BACKEND")["manifest"].is_null());
  CHECK(levers.at("METRALE_W4A16_VARIANT")["declared_by"] == "layers");
  const auto& threads = levers.at("METRALE_CPU_THREADS");
  CHECK(threads["declared_by"] == "backend cpu");
  CHECK(threads["manifest"].get<std::string>().ends_with("cpu.json"));
  CHECK(threads["value"] == "2");
  auto table = run("levers");
  CHECK(has(table.out, "backend cpu"));

  auto typo = run("levers", {{"METRALE_CPU_THREDS", "2"}});
  CHECK(has(typo.err, "unknown lever METRALE_CPU_THREDS (did you mean METRALE_CPU_THREADS?)"));
  auto bad = run("levers", {{"METRALE_CPU_THREADS", "many"}});
  CHECK(bad.code == 3);
  CHECK(has(bad.err, "METRALE_CPU_THREADS=\"many\" is not valid: expected an unsigned 32-bit integer (lever "
                     "declared by backend cpu in manifest "));
}

TEST_CASE("compile goes through the registry: without a cuda manifest it is a refusal saying so") {
  auto r = run("compile --target sm_90", {{"METRALE_MANIFESTS", CPU_MANIFEST}});
  CHECK(r.code == 3);
  INFO(r.err);
  CHECK(has(r.err, "extension 'metrale_cuda_compile' of backend 'cuda': no manifest names the backend"));
}

TEST_CASE("audit --lock, then METRALE_LOCK refuses a changed configuration and accepts the same one") {
  TempDir dir;
  std::string lock = (dir / "lock.json").string();
  REQUIRE(run("audit --lock " + quote(lock)).code == 0);
  CHECK(run("audit", {{"METRALE_LOCK", lock}}).code == 0);
  auto changed = run("audit", {{"METRALE_LOCK", lock}, {"METRALE_NO_K64_N64", "1"}});
  CHECK(changed.code == 3);
  CHECK(has(changed.err, "w4a16/w4a16_gemm_t_k64_n64_p3: in the lock only"));
  CHECK(has(changed.err, "cli/cmd_audit.cpp:"));

  auto a = run("audit --json");
  auto b = run("audit --json", {{"METRALE_NO_TGEMM_PIPELINE3", "1"}});
  write_file(dir / "a.json", a.out);
  write_file(dir / "b.json", b.out);
  auto diff = run("audit --diff " + quote((dir / "a.json").string()) + " " + quote((dir / "b.json").string()));
  CHECK(diff.code == 1);
  CHECK(has(diff.out, "w4a16/w4a16_gemm_t_p3: in the first only"));
  CHECK(run("audit --diff " + quote((dir / "a.json").string()) + " " + quote((dir / "a.json").string())).code == 0);

  // A malformed lock is a refusal (exit 3) naming the file and the field; so is a FIFO.
  const std::string bad = (dir / "bad.lock").string();
  write_file(bad, R"({"lock_format": 1, "rows": [{"x": 1}]})");
  auto refused = run("audit", {{"METRALE_LOCK", bad}});
  CHECK(refused.code == 3);
  CHECK(has(refused.err, bad + ": not a lock file: /rows/0/site"));
  auto bad_diff = run("audit --diff " + quote(bad) + " " + quote((dir / "a.json").string()));
  CHECK(bad_diff.code == 1);
  CHECK(has(bad_diff.err, bad + ": /rows/0/site"));
}

TEST_CASE("audit --model takes run's tier flags; every row shows its site's tier") {
  auto r = run("audit --model small-dense --json --weight-quantization int8 --activation-quantization int8 --group-size 64");
  REQUIRE(r.code == 0);
  const auto rows = nlohmann::json::parse(r.out)["rows"];
  auto gemm = std::find_if(rows.begin(), rows.end(), [](const auto& row) { return row["kernel"] == "w8a8_gemm"; });
  REQUIRE(gemm != rows.end());
  CHECK((*gemm)["annotations"]["tier"] == "int8/w8a8");
  CHECK((*gemm)["annotations"]["tier_note"] == "w8a8: int8 activations (--activation-quantization int8)");
  CHECK((*gemm)["pinned"] == nlohmann::json::array({"tier"}));
  auto table = run("audit --model small-dense --weight-quantization int4-zp");
  REQUIRE(table.code == 0);
  CHECK(has(table.out, "annotations"));
  CHECK(has(table.out, "tier=bf16/w4a16_zp; tier_note=w4a16_zp: bf16 activations (default)"));
  // The same flags as run: an invalid tier is a refusal, an invalid group a usage error; the
  // flags resolve an FFN, so they need --model.
  auto bad = run("audit --model small-dense --activation-quantization int4");
  CHECK(bad.code == 3);
  CHECK(has(bad.err, "--activation-quantization int4 is not valid: expected bf16, int8 or fp8"));
  CHECK(run("audit --model small-dense --group-size 48").code == 2);
  CHECK(run("audit --weight-quantization int8").code == 2);
  // fp8 activations on FP8 weights run on the CPU (E4M3 activations widened to bf16 exactly).
  auto fp8 = run("audit --model small-dense --weight-quantization fp8 --activation-quantization fp8");
  CHECK(fp8.code == 0);
  CHECK(has(fp8.out, "fp8/fp8_gemm_a8"));
  CHECK(has(fp8.out, "quant/quantize_fp8"));
  CHECK(has(fp8.out, "tier=fp8/fp8"));
  // fp8 activations on integer weights: no family runs the pair, and the tier was explicit.
  auto mismatch = run("audit --model small-dense --weight-quantization int8 --activation-quantization fp8");
  CHECK(mismatch.code == 3);
  CHECK(has(mismatch.err, "--activation-quantization fp8: fp8 activations run with FP8 (fp8-e4m3) and 4-bit "
                          "(w4a16-nk-g128, w4-zp) weights, but ffn has w8-zp weights"));
}

TEST_CASE("a lock pins each row's tier; enforcing it refuses a different tier naming site, locked and resolved tier") {
  TempDir dir;
  const std::string lock = (dir / "lock.json").string();
  REQUIRE(run("audit --model small-dense --weight-quantization int4-zp --lock " + quote(lock)).code == 0);
  const auto doc = nlohmann::json::parse(slurp(lock));
  CHECK(doc["lock_format"] == 1);
  CHECK(doc["lock_format_minor"] == 2);
  auto gemm = std::find_if(doc["rows"].begin(), doc["rows"].end(), [](const auto& row) { return row["kernel"] == "w4a16_zp_gemm"; });
  REQUIRE(gemm != doc["rows"].end());
  CHECK((*gemm)["annotations"] == nlohmann::json{{"tier", "bf16/w4a16_zp"}});
  CHECK(run("audit --model small-dense --weight-quantization int4-zp", {{"METRALE_LOCK", lock}}).code == 0);
  // The same weights under int8 activations (the lever this time): refused, the tier named.
  auto changed = run("audit --model small-dense --weight-quantization int4-zp",
                     {{"METRALE_LOCK", lock}, {"METRALE_ACTIVATION_QUANTIZATION", "int8"}});
  CHECK(changed.code == 3);
  CHECK(has(changed.err, "layers/ffn/dense_ffn.cpp:"));
  CHECK(has(changed.err, ": annotation tier bf16/w4a16_zp in the lock, int8/w4a8 in the current configuration"));

  // A lock of minor 1 (rows carry "tier", the default bf16/w4a16 on every row no layer tiered):
  // its tier is the tier annotation, compared where the current rows carry one.
  REQUIRE(run("audit --model small-dense --lock " + quote(lock)).code == 0);
  auto minor1 = nlohmann::json::parse(slurp(lock));
  minor1["lock_format_minor"] = 1;
  for (auto& row : minor1["rows"]) {
    row["tier"] = row["annotations"].value("tier", std::string("bf16/w4a16"));
    row.erase("annotations");
  }
  const std::string minor1_lock = (dir / "minor1.json").string();
  write_file(minor1_lock, minor1.dump());
  CHECK(run("audit --model small-dense", {{"METRALE_LOCK", minor1_lock}}).code == 0);
  auto refused = run("audit --model small-dense --weight-quantization int8", {{"METRALE_LOCK", minor1_lock}});
  CHECK(refused.code == 3);
  CHECK(has(refused.err, ": annotation tier bf16/w4a16 in the lock, bf16/w8a16 in the current configuration"));

  // A lock of minor 0 (no lock_format_minor, no tiers): its annotations are not compared; the
  // kernels a different tier looks up still are.
  auto minor0 = minor1;
  minor0.erase("lock_format_minor");
  for (auto& row : minor0["rows"]) row.erase("tier");
  const std::string minor0_lock = (dir / "minor0.json").string();
  write_file(minor0_lock, minor0.dump());
  CHECK(run("audit --model small-dense", {{"METRALE_LOCK", minor0_lock}}).code == 0);
  auto minor0_refused = run("audit --model small-dense --weight-quantization int8", {{"METRALE_LOCK", minor0_lock}});
  CHECK(minor0_refused.code == 3);
  CHECK_FALSE(has(minor0_refused.err, "annotation tier"));
  CHECK(has(minor0_refused.err, "w8a16/w8a16_gemm: in the current configuration only"));
}
