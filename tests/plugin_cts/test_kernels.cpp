// SPDX-License-Identifier: MIT OR Apache-2.0
// An instance's facts and kernels: last_error, device_info, list_kernels against the manifest,
// get_kernel for every listed kernel and for unknown ones, and lookups from many threads at once.
#include "cts.hpp"

#include <metrale/target.hpp>

#include <algorithm>
#include <latch>
#include <map>
#include <set>
#include <thread>

namespace {

using Signatures = std::map<std::string, std::vector<metrale_param_type>>;

// What list_kernels answers, checked for shape, as module/name -> parameter types.
Signatures listed_by_plugin(const cts::Instance& d) {
  const metrale_kernel_desc* kernels = nullptr;
  size_t count = 0;
  REQUIRE(d.t().list_kernels(d.raw(), &kernels, &count) == METRALE_STATUS_OK);
  REQUIRE((count == 0 || kernels != nullptr));
  Signatures out;
  for (size_t i = 0; i < count; ++i) {
    const metrale_kernel_desc& k = kernels[i];
    REQUIRE_MESSAGE((k.module != nullptr && k.name != nullptr), "kernel " << i << " has a NULL module or name");
    std::vector<metrale_param_type> types;
    if (k.param_types == nullptr) {
      CHECK_MESSAGE(k.param_count == 0, cts::key(k) << ": param_count " << k.param_count << " with NULL param_types");
      cts::skip("parameter types of " + cts::key(k), "the plugin does not state them (param_types NULL)");
    } else {
      for (uint32_t p = 0; p < k.param_count; ++p) {
        CHECK_MESSAGE(metrale_param_type_name(k.param_types[p]) != nullptr,
                      cts::key(k) << ": parameter " << p << " has type value " << k.param_types[p]);
        types.push_back(k.param_types[p]);
      }
    }
    CHECK_MESSAGE(out.emplace(cts::key(k), types).second, cts::key(k) << " is listed twice");
  }
  return out;
}

Signatures listed_by_manifest() {
  Signatures out;
  for (const auto& module : cts::manifest().modules)
    for (const auto& kernel : module.kernels) {
      std::vector<metrale_param_type> types;
      for (const auto& p : kernel.params) types.push_back(p.type);
      out.emplace(module.name + "/" + kernel.name, types);
    }
  return out;
}

std::string types_text(const std::vector<metrale_param_type>& types) {
  std::string out = "(";
  for (size_t i = 0; i < types.size(); ++i) out += (i ? ", " : "") + std::string(metrale_param_type_name(types[i]));
  return out + ")";
}

// Whether the manifest gates this kernel away from the device's target (min_target, cpu_features).
bool gated(const metrale::ManifestKernel& kernel, const std::string& target) {
  const auto& tiers = cts::manifest().target_tiers;
  if (kernel.min_target && !metrale::target_satisfies(target, *kernel.min_target, tiers)) return true;
  const auto have = metrale::target_features(target, tiers);
  for (const auto& feature : kernel.cpu_features)
    if (std::find(have.begin(), have.end(), feature) == have.end()) return true;
  return false;
}

std::string device_target(const cts::Instance& d) {
  metrale_device_info info{};
  info.struct_size = sizeof info;
  REQUIRE(d.t().device_info(d.raw(), &info) == METRALE_STATUS_OK);
  REQUIRE(info.target != nullptr);
  return info.target;
}

// Every manifest kernel the device is not gated from, resolved once: module/name -> handle.
const std::map<std::string, uint64_t>& resolved(const cts::Instance& d) {
  static const std::map<std::string, uint64_t> handles = [&] {
    std::map<std::string, uint64_t> out;
    const std::string target = device_target(d);
    for (const auto& module : cts::manifest().modules)
      for (const auto& kernel : module.kernels) {
        uint64_t handle = 0;
        const std::string key = module.name + "/" + kernel.name;
        const metrale_status s = d.t().get_kernel(d.raw(), module.name.c_str(), kernel.name.c_str(), &handle);
        if (s == METRALE_STATUS_OK) out.emplace(key, handle);
        const bool away = gated(kernel, target);
        CHECK_MESSAGE((s == METRALE_STATUS_OK || (away && s == METRALE_STATUS_INCOMPATIBLE)),
                      "get_kernel(" << key << ") answered " << cts::status_name(s) << " on target " << target
                                    << (away ? " (gated there by the manifest: OK or INCOMPATIBLE)" : "") << ": "
                                    << d.last_error());
        if (s == METRALE_STATUS_OK) CHECK_MESSAGE(handle != 0, "get_kernel(" << key << ") answered OK with handle 0");
        if (s != METRALE_STATUS_OK) {
          CHECK_MESSAGE(handle == 0, "get_kernel(" << key << ") failed but wrote handle " << handle);
          cts::check_last_error_set(d, ("get_kernel(" + key + ")").c_str());
        }
      }
    return out;
  }();
  return handles;
}

}  // namespace

TEST_CASE("last_error: never NULL; empty on a fresh instance") {
  CHECK(cts::table().last_error(nullptr) != nullptr);
  cts::table().destroy(nullptr);  // ignored
  cts::Instance fresh;
  if (fresh.status != METRALE_STATUS_OK) {
    cts::device("last_error on a fresh instance");
    return;
  }
  const char* text = fresh.t().last_error(fresh.raw());
  REQUIRE(text != nullptr);
  CHECK(std::string(text).empty());
}

TEST_CASE("device_info: a name and a target, within the struct the caller declared") {
  cts::Instance* d = cts::device("device_info");
  if (d == nullptr) return;
  struct Guarded {
    metrale_device_info info;
    std::array<unsigned char, 64> guard;
  } g;
  std::memset(&g, 0xa5, sizeof g);
  g.info.struct_size = sizeof g.info;
  REQUIRE(d->t().device_info(d->raw(), &g.info) == METRALE_STATUS_OK);
  CHECK(g.info.struct_size <= sizeof g.info);
  CHECK(g.info.struct_size >= offsetof(metrale_device_info, compute_units) + sizeof(uint32_t));
  for (unsigned char byte : g.guard) REQUIRE(byte == 0xa5);
  REQUIRE(g.info.name != nullptr);
  CHECK(std::strlen(g.info.name) > 0);
  REQUIRE(g.info.target != nullptr);
  const std::string target = g.info.target;
  CHECK(!target.empty());
  const auto& targets = cts::manifest_json().value("targets", nlohmann::json::array());
  if (!targets.empty())
    CHECK_MESSAGE(std::find(targets.begin(), targets.end(), target) != targets.end(),
                  "target '" << target << "' is not among the manifest's targets " << targets.dump());
  CTS_CHECK_FAILS(*d, d->t().device_info(d->raw(), nullptr), METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("list_kernels: exactly the manifest's kernels, with the same parameter types") {
  cts::Instance* d = cts::device("list_kernels");
  if (d == nullptr) return;
  const Signatures plugin = listed_by_plugin(*d);
  const Signatures manifest = listed_by_manifest();
  for (const auto& [key, types] : manifest) {
    auto it = plugin.find(key);
    CHECK_MESSAGE(it != plugin.end(), key << " is in the manifest but list_kernels does not list it");
    if (it != plugin.end() && !it->second.empty())
      CHECK_MESSAGE(it->second == types, key << ": the plugin declares " << types_text(it->second) << ", the manifest "
                                              << types_text(types));
  }
  for (const auto& [key, types] : plugin)
    CHECK_MESSAGE(manifest.count(key) == 1, key << " is listed by the plugin but not in the manifest");
  CHECK(listed_by_plugin(*d) == plugin);  // the array stays valid and the same
  const metrale_kernel_desc* kernels = nullptr;
  size_t count = 0;
  CTS_CHECK_FAILS(*d, d->t().list_kernels(d->raw(), nullptr, &count), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, d->t().list_kernels(d->raw(), &kernels, nullptr), METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("get_kernel: every listed kernel resolves to a distinct nonzero handle, or is gated") {
  cts::Instance* d = cts::device("get_kernel of every kernel");
  if (d == nullptr) return;
  const auto& handles = resolved(*d);
  std::set<uint64_t> distinct;
  for (const auto& [key, handle] : handles) distinct.insert(handle);
  CHECK(distinct.size() == handles.size());
  if (cts::manifest().kernel_count() == 0) cts::skip("get_kernel of every kernel", "the manifest lists no kernel");
  for (const auto& [key, handle] : handles) {  // a second lookup answers the same handle
    const auto slash = key.find('/');
    uint64_t again = 0;
    CHECK(d->t().get_kernel(d->raw(), key.substr(0, slash).c_str(), key.substr(slash + 1).c_str(), &again) ==
          METRALE_STATUS_OK);
    CHECK_MESSAGE(again == handle, key << ": handle " << handle << " then " << again);
  }
}

TEST_CASE("get_kernel: unknown modules and kernels are not found, named in the message; NULLs are invalid") {
  cts::Instance* d = cts::device("get_kernel of unknown kernels");
  if (d == nullptr) return;
  uint64_t handle = 77;
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), "metrale_cts_module", "k", &handle), METRALE_STATUS_NOT_FOUND);
  CHECK(handle == 0);
  CHECK_MESSAGE(d->last_error().find("metrale_cts_module") != std::string::npos, "message: " << d->last_error());
  const std::string module = cts::manifest().modules.empty() ? "metrale_cts_module" : cts::manifest().modules[0].name;
  handle = 77;
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), module.c_str(), "metrale_cts_kernel", &handle), METRALE_STATUS_NOT_FOUND);
  CHECK(handle == 0);
  CHECK_MESSAGE(d->last_error().find("metrale_cts_kernel") != std::string::npos, "message: " << d->last_error());
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), "", "", &handle), METRALE_STATUS_NOT_FOUND);
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), nullptr, "k", &handle), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), module.c_str(), nullptr, &handle), METRALE_STATUS_INVALID_ARGUMENT);
  CTS_CHECK_FAILS(*d, d->t().get_kernel(d->raw(), module.c_str(), "k", nullptr), METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("lookups from many threads at once agree with one thread's") {
  cts::Instance* d = cts::device("concurrent lookups");
  if (d == nullptr) return;
  const auto& expected = resolved(*d);
  const Signatures listed = listed_by_plugin(*d);
  std::vector<std::string> keys;
  for (const auto& [key, handle] : expected) keys.push_back(key);
  constexpr size_t kThreads = 8;
  struct Seen {
    std::map<std::string, uint64_t> handles;
    std::vector<std::string> kernels;
    metrale_status unknown = METRALE_STATUS_OK;
    bool error_text = false;
  };
  std::vector<Seen> seen(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      const metrale_kernel_desc* kernels = nullptr;
      size_t count = 0;
      if (d->t().list_kernels(d->raw(), &kernels, &count) == METRALE_STATUS_OK)
        for (size_t k = 0; k < count; ++k) seen[i].kernels.push_back(cts::key(kernels[k]));
      for (size_t k = 0; k < keys.size(); ++k) {  // each thread starts elsewhere in the list
        const std::string& key = keys[(k + i * 7) % keys.size()];
        const auto slash = key.find('/');
        uint64_t got = 0;
        d->t().get_kernel(d->raw(), key.substr(0, slash).c_str(), key.substr(slash + 1).c_str(), &got);
        seen[i].handles[key] = got;
      }
      uint64_t none = 0;
      seen[i].unknown = d->t().get_kernel(d->raw(), "metrale_cts_module", "k", &none);
      const char* text = d->t().last_error(d->raw());
      seen[i].error_text = text != nullptr && *text != '\0';
    });
  for (auto& t : threads) t.join();
  for (const Seen& s : seen) {
    CHECK(s.handles == expected);
    CHECK(std::set<std::string>(s.kernels.begin(), s.kernels.end()).size() == listed.size());
    CHECK(s.unknown == METRALE_STATUS_NOT_FOUND);
    CHECK(s.error_text);
  }
}
