// SPDX-License-Identifier: MIT OR Apache-2.0
// The library-level contract, before any instance: the version handshake, the function table
// (struct_size, required entries, get_proc_address), describe(), device_count() and create()'s
// refusals. docs/plugin-abi.md, "The contract".
#include "cts.hpp"

#include <dlfcn.h>

#include <climits>
#include <thread>

using cts::table;

namespace {

constexpr uint32_t kPoison = 0xdeadbeefu;

struct Answer {
  metrale_status status;
  uint32_t chosen;
  const metrale_plugin_table* table;
};

// The entry point on one offered range, with poisoned out-values.
Answer offer(uint32_t low, uint32_t high) {
  Answer a{METRALE_STATUS_INTERNAL, kPoison, reinterpret_cast<const metrale_plugin_table*>(&kPoison)};
  a.status = cts::library().entry(low, high, &a.chosen, &a.table);
  return a;
}

// The fields of metrale_plugin_table that must not be NULL, by name.
struct Required {
  const char* name;
  bool present;
};
std::vector<Required> required_entries(const metrale_plugin_table& t) {
  return {{"describe", t.describe != nullptr},           {"device_count", t.device_count != nullptr},
          {"create", t.create != nullptr},               {"destroy", t.destroy != nullptr},
          {"last_error", t.last_error != nullptr},       {"device_info", t.device_info != nullptr},
          {"list_kernels", t.list_kernels != nullptr},   {"get_kernel", t.get_kernel != nullptr},
          {"mem_alloc", t.mem_alloc != nullptr},         {"mem_free", t.mem_free != nullptr},
          {"copy_to_device", t.copy_to_device != nullptr}, {"copy_to_host", t.copy_to_host != nullptr},
          {"copy_device", t.copy_device != nullptr},     {"memset_device", t.memset_device != nullptr},
          {"stream_create", t.stream_create != nullptr}, {"stream_destroy", t.stream_destroy != nullptr},
          {"stream_synchronize", t.stream_synchronize != nullptr}, {"launch", t.launch != nullptr}};
}

// A create_info good in every way but the one a case breaks.
struct CreateInfo {
  cts::HostLog log;
  metrale_backend_create_info info{};
  CreateInfo() {
    info.struct_size = sizeof info;
    info.host = log.callbacks();
    info.manifest_path = path.c_str();
    info.manifest_json = cts::manifest().text.c_str();
  }
  std::string path = cts::manifest().path.string();
};

}  // namespace

TEST_CASE("handshake: the version the manifest declares, inside any offered range that holds it") {
  const uint32_t v = cts::manifest().abi_version;
  for (auto [low, high] : {std::pair{v, v}, std::pair{0u, v}, std::pair{v, v + 5}, std::pair{0u, UINT32_MAX}}) {
    CAPTURE(low);
    CAPTURE(high);
    const Answer a = offer(low, high);
    REQUIRE(a.status == METRALE_STATUS_OK);
    CHECK(a.chosen >= low);
    CHECK(a.chosen <= high);
    REQUIRE(a.table != nullptr);
    CHECK(a.table->abi_version == a.chosen);
    CHECK(a.table == &table());  // the same table every time
  }
  CHECK(offer(v, v).chosen == v);
}

TEST_CASE("handshake: a range without the plugin's version is refused, saying which version it speaks") {
  const uint32_t v = cts::manifest().abi_version;
  std::vector<std::pair<uint32_t, uint32_t>> ranges{{v + 1, v + 10}, {v + 1, UINT32_MAX}};
  if (v > 0) ranges.emplace_back(0u, v - 1);
  for (auto [low, high] : ranges) {
    CAPTURE(low);
    CAPTURE(high);
    const Answer a = offer(low, high);
    CHECK(a.status == METRALE_STATUS_INCOMPATIBLE);
    CHECK(a.chosen == v);  // written even when refusing
    CHECK(a.table == nullptr);
  }
}

TEST_CASE("handshake: a reversed range or a NULL out-pointer is an invalid argument, never a crash") {
  const uint32_t v = cts::manifest().abi_version;
  const Answer reversed = offer(v + 1, v);
  CHECK(reversed.status == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(reversed.chosen == v);
  CHECK(reversed.table == nullptr);

  const metrale_plugin_table* t = reinterpret_cast<const metrale_plugin_table*>(&kPoison);
  CHECK(cts::library().entry(v, v, nullptr, &t) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(t == nullptr);
  uint32_t chosen = kPoison;
  CHECK(cts::library().entry(v, v, &chosen, nullptr) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(chosen == v);
  CHECK(cts::library().entry(v, v, nullptr, nullptr) == METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("the function table: version-1 size at least, every required entry point present") {
  const metrale_plugin_table& t = table();
  CHECK(t.struct_size >= METRALE_PLUGIN_TABLE_V1_SIZE);
  CHECK(t.abi_version == cts::manifest().abi_version);
  for (const Required& entry : required_entries(t)) CHECK_MESSAGE(entry.present, "required entry point '" << std::string(entry.name) << "' is NULL");
}

TEST_CASE("get_proc_address: absent, or NULL for every name the plugin does not offer") {
  const metrale_plugin_table& t = table();
  if (!METRALE_STRUCT_HAS(metrale_plugin_table, &t, get_proc_address)) {
    CHECK_MESSAGE(cts::config().extensions.empty(), "extensions expected, but the table ends before get_proc_address");
    cts::skip("get_proc_address", "the table (struct_size " + std::to_string(t.struct_size) + ") ends before it");
    return;
  }
  if (t.get_proc_address == nullptr) {
    CHECK_MESSAGE(cts::config().extensions.empty(), "extensions expected, but get_proc_address is NULL");
    cts::skip("get_proc_address", "NULL: the plugin offers no extensions");
    return;
  }
  for (const char* unknown : {"metrale_cts_no_such_extension", "", "metrale_plugin_entry", "describe"})
    CHECK_MESSAGE(t.get_proc_address(unknown) == nullptr, "get_proc_address(\"" << std::string(unknown) << "\") is not NULL");
  CHECK(t.get_proc_address(nullptr) == nullptr);
  for (const auto& name : cts::config().extensions) {
    CHECK_MESSAGE(t.get_proc_address(name.c_str()) != nullptr, "extension " << name << " is not offered");
    CHECK_MESSAGE(dlsym(cts::library().handle, name.c_str()) == nullptr, name << " is exported: reach it through the table");
    void* from_thread = nullptr;
    std::thread([&] { from_thread = t.get_proc_address(name.c_str()); }).join();
    CHECK(from_thread == t.get_proc_address(name.c_str()));  // any thread, no instance needed
  }
}

TEST_CASE("describe: the manifest's backend name, a version and a description") {
  // The caller's struct sits in a larger buffer: nothing past its struct_size may change.
  struct Guarded {
    metrale_plugin_info info;
    std::array<unsigned char, 64> guard;
  } g;
  std::memset(&g, 0xa5, sizeof g);
  g.info.struct_size = sizeof g.info;
  REQUIRE(table().describe(&g.info) == METRALE_STATUS_OK);
  CHECK(g.info.struct_size >= offsetof(metrale_plugin_info, description) + sizeof(const char*));
  CHECK(g.info.struct_size <= sizeof g.info);
  for (unsigned char byte : g.guard) REQUIRE(byte == 0xa5);
  REQUIRE(g.info.backend_name != nullptr);
  CHECK(std::string(g.info.backend_name) == cts::manifest().backend);
  REQUIRE(g.info.version != nullptr);
  CHECK(std::strlen(g.info.version) > 0);
  REQUIRE(g.info.description != nullptr);
  CHECK(std::strlen(g.info.description) > 0);
  CHECK(table().describe(nullptr) == METRALE_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("device_count: a count (0 is no error), or UNAVAILABLE with a message") {
  uint32_t count = kPoison;
  char error[512] = {};
  const metrale_status s = table().device_count(&count, error, sizeof error);
  CHECK_MESSAGE((s == METRALE_STATUS_OK || s == METRALE_STATUS_UNAVAILABLE), "device_count answered " << cts::status_name(s));
  if (s == METRALE_STATUS_OK) CHECK(count != kPoison);
  if (s == METRALE_STATUS_UNAVAILABLE) {
    CHECK(count == 0);
    CHECK(std::strlen(error) > 0);
  }
  CHECK(table().device_count(nullptr, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(table().device_count(nullptr, nullptr, 0) == METRALE_STATUS_INVALID_ARGUMENT);  // no buffer: no crash
}

TEST_CASE("create: what it cannot use is refused with a status and a bounded message") {
  metrale_backend* out = reinterpret_cast<metrale_backend*>(&out);
  char error[512] = {};
  CHECK(table().create(nullptr, &out, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  CHECK(std::strlen(error) > 0);
  CHECK(table().create(nullptr, &out, nullptr, 0) == METRALE_STATUS_INVALID_ARGUMENT);  // no buffer: no crash

  CreateInfo good;
  CHECK(table().create(&good.info, nullptr, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
  SUBCASE("no host callbacks") {
    good.info.host = nullptr;
    CHECK(table().create(&good.info, &out, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(out == nullptr);
  }
  SUBCASE("host callbacks without log") {
    metrale_host_callbacks host{sizeof(metrale_host_callbacks), nullptr, nullptr};
    good.info.host = &host;
    CHECK(table().create(&good.info, &out, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
  }
  SUBCASE("an option with a NULL key or value") {
    const metrale_option bad[] = {{nullptr, "1"}, {"x", nullptr}};
    for (const metrale_option& option : bad) {
      good.info.options = &option;
      good.info.option_count = 1;
      CHECK(table().create(&good.info, &out, error, sizeof error) == METRALE_STATUS_INVALID_ARGUMENT);
      CHECK(out == nullptr);
    }
  }
  SUBCASE("a short error buffer gets a truncated, terminated message and nothing past it") {
    std::array<char, 40> small;
    small.fill('#');
    CHECK(table().create(nullptr, &out, small.data(), 8) == METRALE_STATUS_INVALID_ARGUMENT);
    CHECK(std::strlen(small.data()) <= 7);
    for (size_t i = 8; i < small.size(); ++i) REQUIRE(small[i] == '#');
  }
}

TEST_CASE("create: a device index beyond device_count() is not found") {
  uint32_t count = 0;
  char error[512] = {};
  if (table().device_count(&count, error, sizeof error) != METRALE_STATUS_OK) {
    cts::skip("create beyond device_count", std::string("device_count() gives no count here: ") + error);
    return;
  }
  for (uint32_t index : {count, UINT32_MAX}) {
    cts::Instance beyond(cts::Options{}, index);
    CAPTURE(index);
    CHECK(beyond.status == METRALE_STATUS_NOT_FOUND);
    CHECK(beyond.raw() == nullptr);
    CHECK(beyond.create_error.size() > 0);
  }
}

TEST_CASE("create: an unknown option is logged and ignored") {
  cts::Instance instance(cts::Options{{"metrale_cts_unknown_option", "1"}});
  if (instance.status == METRALE_STATUS_UNAVAILABLE && !cts::config().expect_device) {
    cts::skip("unknown create() option", "create() answered UNAVAILABLE: " + instance.create_error);
    return;
  }
  CHECK_MESSAGE(instance.status == METRALE_STATUS_OK, "create() answered " << cts::status_name(instance.status) << ": "
                                                                            << instance.create_error);
  CHECK_MESSAGE(instance.log().mentions("metrale_cts_unknown_option"), "no log line names the unknown option");
}
