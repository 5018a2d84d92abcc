// SPDX-License-Identifier: MIT OR Apache-2.0
// The harness of cts.hpp and the suite's main(): reads the command line, loads the plugin the
// manifest names with dlopen() and its entry point, runs the doctest cases, then lists every skip.
// Exit 77 (skipped) when the plugin could create no instance here and none was expected.
#define DOCTEST_CONFIG_IMPLEMENT
#include "cts.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace cts {

namespace {

Config g_config;
std::mutex g_skip_mutex;
std::vector<std::string> g_skips;
bool g_device_missing = false;

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "plugin_cts: " << problem << "\n"
            << "usage: plugin_cts --manifest PATH [--option KEY=VALUE]... [--kernel-source-dir DIR]...\n"
            << "                  [--cache-dir DIR] [--extension NAME]... [--expect-device] [doctest options]\n";
  std::exit(2);
}

// Takes the suite's own options out of argv; what is left goes to doctest.
std::vector<char*> parse(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--manifest") {
      g_config.manifest = value();
    } else if (arg == "--option") {
      const std::string pair = value();
      const auto eq = pair.find('=');
      if (eq == std::string::npos) usage("--option takes KEY=VALUE, got '" + pair + "'");
      g_config.options.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
    } else if (arg == "--kernel-source-dir") {
      g_config.kernel_source_dirs.push_back(value());
    } else if (arg == "--cache-dir") {
      g_config.cache_dir = value();
    } else if (arg == "--extension") {
      g_config.extensions.push_back(value());
    } else if (arg == "--expect-device") {
      g_config.expect_device = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (g_config.manifest.empty()) usage("--manifest is required");
  return rest;
}

}  // namespace

const Config& config() { return g_config; }

const metrale::Manifest& manifest() {
  static const metrale::Manifest loaded = [] {
    metrale::ManifestResult result = metrale::load_manifest(g_config.manifest);
    std::string problems;
    for (const auto& p : result.problems) problems += p.to_string() + "\n";
    if (!result.manifest) {
      std::cerr << "plugin_cts: the manifest does not validate:\n" << problems;
      std::exit(1);
    }
    return *result.manifest;
  }();
  return loaded;
}

const nlohmann::json& manifest_json() {
  static const nlohmann::json json = nlohmann::json::parse(manifest().text);
  return json;
}

const Library& library() {
  static const Library loaded = [] {
    Library lib;
    const std::string path = manifest().library.string();
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      std::cerr << "plugin_cts: cannot load " << path << ": " << dlerror() << "\n";
      std::exit(1);
    }
    lib.entry = reinterpret_cast<metrale_plugin_entry_fn>(dlsym(lib.handle, METRALE_PLUGIN_ENTRY_SYMBOL));
    uint32_t chosen = 0;
    const uint32_t abi = manifest().abi_version;
    if (lib.entry == nullptr || lib.entry(abi, abi, &chosen, &lib.table) != METRALE_STATUS_OK ||
        lib.table == nullptr) {
      std::cerr << "plugin_cts: " << path << ": no " << METRALE_PLUGIN_ENTRY_SYMBOL
                << ", or it refuses the manifest's ABI " << abi << "\n";
      std::exit(1);
    }
    return lib;
  }();
  return loaded;
}

std::string status_name(metrale_status status) {
  switch (status) {
    case METRALE_STATUS_OK: return "OK";
    case METRALE_STATUS_NOT_FOUND: return "NOT_FOUND";
    case METRALE_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case METRALE_STATUS_INCOMPATIBLE: return "INCOMPATIBLE";
    case METRALE_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case METRALE_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case METRALE_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case METRALE_STATUS_INTERNAL: return "INTERNAL";
  }
  return "(not a metrale_status)";
}

void skip(const std::string& check, const std::string& reason) {
  std::lock_guard lock(g_skip_mutex);
  g_skips.push_back(check + ": " + reason);
  std::cout << "SKIP [" << manifest().backend << "] " << check << ": " << reason << std::endl;
}

std::vector<std::string> skips() {
  std::lock_guard lock(g_skip_mutex);
  return g_skips;
}

bool device_missing() { return g_device_missing; }

HostLog::HostLog() {
  host_.struct_size = sizeof host_;
  host_.user = this;
  host_.log = &HostLog::log;
}

void HostLog::log(void* user, metrale_log_level, const char* message) {
  auto* self = static_cast<HostLog*>(user);
  std::lock_guard lock(self->mutex_);
  self->lines_.emplace_back(message ? message : "(null)");
}

bool HostLog::mentions(const std::string& text) const {
  std::lock_guard lock(mutex_);
  for (const auto& line : lines_)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

Instance::Instance(const Options& extra, uint32_t device_index) : log_(std::make_unique<HostLog>()) {
  Options all = g_config.options;
  all.insert(all.end(), extra.begin(), extra.end());
  std::vector<metrale_option> options;
  for (const auto& [k, v] : all) options.push_back({k.c_str(), v.c_str()});
  std::vector<const char*> dirs;
  for (const auto& d : g_config.kernel_source_dirs) dirs.push_back(d.c_str());
  const std::string manifest_path = manifest().path.string();

  metrale_backend_create_info info{};
  info.struct_size = sizeof info;
  info.host = log_->callbacks();
  info.device_index = device_index;
  info.cache_dir = g_config.cache_dir ? g_config.cache_dir->c_str() : nullptr;
  info.kernel_source_dirs = dirs.empty() ? nullptr : dirs.data();
  info.kernel_source_dir_count = static_cast<uint32_t>(dirs.size());
  info.manifest_path = manifest_path.c_str();
  info.manifest_json = manifest().text.c_str();
  info.options = options.empty() ? nullptr : options.data();
  info.option_count = static_cast<uint32_t>(options.size());
  char error[2048] = {};
  status = table().create(&info, &backend_, error, sizeof error);
  create_error = error;
  if (status != METRALE_STATUS_OK) backend_ = nullptr;
}

Instance::~Instance() { table().destroy(backend_); }

std::string Instance::last_error() const {
  const char* text = table().last_error(backend_);
  return text ? text : "(NULL)";
}

namespace {
std::unique_ptr<Instance> g_shared;  // created by the first check that needs it, destroyed by main()
}  // namespace

Instance* device(const std::string& check) {
  static std::once_flag once;
  std::call_once(once, [] { g_shared = std::make_unique<Instance>(); });
  Instance* shared = g_shared.get();
  if (shared->status == METRALE_STATUS_OK) return shared;
  const std::string why = std::string("create() answered ") + status_name(shared->status) + ": " + shared->create_error;
  if (g_config.expect_device) {
    FAIL_CHECK("--expect-device, but " << why);
  } else {
    g_device_missing = true;
    skip(check, "no instance on this machine; " + why);
  }
  return nullptr;
}

void release_device() { g_shared.reset(); }

void check_last_error_set(const Instance& instance, const char* call) {
  const char* text = table().last_error(instance.raw());
  const std::string what = call;
  REQUIRE_MESSAGE(text != nullptr, "last_error() returned NULL after " << what);
  CHECK_MESSAGE(std::strlen(text) > 0, "last_error() is empty after the failed " << what);
}

}  // namespace cts

int main(int argc, char** argv) {
  std::vector<char*> rest = cts::parse(argc, argv);
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  const int failed = context.run();
  cts::release_device();
  if (context.shouldExit()) return failed;
  const auto skipped = cts::skips();
  std::cout << "plugin conformance, backend '" << cts::manifest().backend << "' (" << cts::manifest().library.string()
            << "): " << (failed ? "FAILED" : "passed") << ", " << skipped.size() << " check(s) skipped\n";
  for (const auto& line : skipped) std::cout << "  skipped " << line << "\n";
  if (failed) return failed;
  return cts::device_missing() ? 77 : 0;
}
