// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/paths.hpp>
#include <metrale/registry.hpp>
#include <metrale/names.hpp>

#include "manifest_levers.hpp"
#include "plugin_guard.hpp"
#include "plugin_library.hpp"

#include <algorithm>
#include <array>
#include <set>

namespace fs = std::filesystem;

namespace metrale {

namespace {

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::vector<fs::path> json_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
    if (it->path().extension() == ".json" && it->is_regular_file(error)) files.push_back(it->path());
  std::sort(files.begin(), files.end());  // stable order across file systems
  return files;
}

std::string join_problems(const std::vector<ManifestProblem>& problems) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p.to_string();
  return out;
}

// create() on the entry's library; sets the entry's state (and instance when it succeeds).
void create_instance(RegistryEntry& entry, const PluginLibrary& library, const LeverOptions& options,
                     const std::shared_ptr<AuditLog>& audit) {
  const Manifest& manifest = *entry.manifest;
  std::string cache = cache_dir().value_or(fs::path()).string();
  std::vector<std::string> source_dir_storage;
  for (const auto& dir : kernel_source_dirs()) source_dir_storage.push_back(dir.string());
  std::vector<const char*> source_dirs;
  for (const auto& dir : source_dir_storage) source_dirs.push_back(dir.c_str());
  std::string manifest_path = manifest.path.string();

  metrale_backend_create_info info{};
  info.struct_size = sizeof(info);
  info.host = &library.host_callbacks();
  info.device_index = options.device_index();
  info.cache_dir = cache.empty() ? nullptr : cache.c_str();
  info.kernel_source_dirs = source_dirs.data();
  info.kernel_source_dir_count = static_cast<uint32_t>(source_dirs.size());
  info.manifest_path = manifest_path.c_str();
  info.manifest_json = manifest.text.c_str();
  info.options = options.data();
  info.option_count = options.count();

  metrale_backend* raw = nullptr;
  std::array<char, 1024> error{};
  const std::string label = "backend " + manifest.backend + " (plugin " + manifest.library.string() + ")";
  const PluginGuard guard(label, &library.table());
  const metrale_status status =
      guard.invoke("create()", [&] { return library.table().create(&info, &raw, error.data(), error.size()); });
  error.back() = '\0';
  if (status != METRALE_STATUS_OK || raw == nullptr) {
    Status s = status == METRALE_STATUS_OK ? Status::internal : status_from_abi(status);
    entry.state = s == Status::unavailable ? EntryState::unavailable : EntryState::failed;
    std::string message = error[0] ? error.data() : "no message";
    if (status == METRALE_STATUS_OK) message = "create() returned OK with a null instance";
    entry.reason = "create() failed (" + std::string(status_name(s)) + "): " + message;
    return;
  }
  PluginInstance instance(raw, PluginInstanceDeleter{&library.table(), label});
  entry.instance = std::make_shared<Backend>(entry.library, manifest, std::move(instance), audit);
  entry.state = EntryState::loaded;
}

// Never throws for a bad plugin (the entry records it); a bad lever value is a Refusal.
void load_entry(RegistryEntry& entry, const std::shared_ptr<AuditLog>& audit) {
  const LeverOptions options(*entry.manifest);  // a bad lever value is a Refusal, before any loading
  try {
    entry.library = PluginLibrary::open(*entry.manifest);
    create_instance(entry, *entry.library, options, audit);
    if (entry.state != EntryState::loaded) return;
    for (const auto& row : entry.instance->kernel_availability()) {
      if (row.gated || row.note.empty()) continue;
      entry.cross_check.push_back(row.module + "/" + row.name + ": " + row.note);
    }
  } catch (const std::exception& e) {
    entry.instance.reset();  // destroys the instance, if one was made, while the library is loaded
    entry.cross_check.clear();
    entry.state = EntryState::failed;
    entry.reason = e.what();
  }
}

std::string disabled_by() {
  return "METRALE_BACKENDS_DISABLE=" + lever_raw("METRALE_BACKENDS_DISABLE").value_or("");
}

// Validates one manifest and decides its entry's state (pending, disabled, shadowed, invalid,
// skipped); declares the levers of each manifest that claims its backend.
void scan_entry(RegistryEntry& entry, const std::vector<std::string>& disabled, std::set<std::string, std::less<>>& claimed) {
  ManifestResult parsed = load_manifest(entry.manifest_path);
  if (!parsed.manifest) {
    entry.state = parsed.skipped_format ? EntryState::skipped : EntryState::invalid;
    entry.reason = join_problems(parsed.problems);
    entry.backend = parsed.backend;  // read from the text already read: the file is opened once
    logger()->warn("{}", entry.reason);
    return;
  }
  entry.manifest = std::move(parsed.manifest);
  entry.manifest_path = entry.manifest->path;
  entry.backend = entry.manifest->backend;
  entry.priority = entry.manifest->priority;
  const bool off = glob_match_any(disabled, entry.backend);
  if (claimed.count(entry.backend)) {
    entry.state = off ? EntryState::disabled : EntryState::shadowed;
    entry.reason = off ? "disabled by " + disabled_by()
                       : "backend '" + entry.backend + "' is already provided by an earlier manifest";
  } else if (auto conflict = declare_manifest_levers(*entry.manifest)) {
    entry.state = EntryState::invalid;
    entry.reason = *conflict;
    logger()->warn("{}", entry.reason);
  } else {
    claimed.insert(entry.backend);
    entry.state = off ? EntryState::disabled : EntryState::pending;
    if (off) entry.reason = "disabled by " + disabled_by();
  }
}

}  // namespace

const char* manifest_origin_name(ManifestOrigin origin) noexcept {
  switch (origin) {
    case ManifestOrigin::explicit_list: return "METRALE_MANIFESTS";
    case ManifestOrigin::added: return "METRALE_ADD_MANIFESTS";
    case ManifestOrigin::plugin_path: return "METRALE_PLUGIN_PATH";
    case ManifestOrigin::user_data: return "user data dir";
    case ManifestOrigin::installed: return "installed";
    case ManifestOrigin::build_tree: return "build tree";
  }
  return "?";
}

const char* entry_state_name(EntryState state) noexcept {
  switch (state) {
    case EntryState::pending: return "pending";
    case EntryState::loaded: return "loaded";
    case EntryState::unavailable: return "unavailable";
    case EntryState::disabled: return "disabled";
    case EntryState::shadowed: return "shadowed";
    case EntryState::invalid: return "invalid";
    case EntryState::skipped: return "skipped";
    case EntryState::failed: return "failed";
  }
  return "?";
}

std::vector<std::pair<fs::path, ManifestOrigin>> discover_manifest_files(const DiscoveryOptions& options) {
  std::vector<std::pair<fs::path, ManifestOrigin>> files;
  if (options.manifests) {
    for (const auto& file : *options.manifests) files.emplace_back(file, ManifestOrigin::explicit_list);
    return files;
  }
  if (auto list = lever_raw("METRALE_MANIFESTS")) {
    for (const auto& file : split(*list, ':')) files.emplace_back(file, ManifestOrigin::explicit_list);
    return files;
  }
  if (auto list = lever_raw("METRALE_ADD_MANIFESTS"))
    for (const auto& file : split(*list, ':')) files.emplace_back(file, ManifestOrigin::added);
  if (auto list = lever_raw("METRALE_PLUGIN_PATH"))
    for (const auto& dir : split(*list, ':'))
      for (auto& file : json_files_in(dir)) files.emplace_back(std::move(file), ManifestOrigin::plugin_path);
  if (options.use_default_dirs) {
    if (auto dir = user_plugin_dir())
      for (auto& file : json_files_in(*dir)) files.emplace_back(std::move(file), ManifestOrigin::user_data);
  }
  // Run uninstalled, the build tree's plugins take the installed directory's place: an older
  // installed copy must not shadow the plugins built with this binary.
  std::vector<fs::path> system_dirs = options.installed_dirs;
  ManifestOrigin system_origin = ManifestOrigin::installed;
  if (!options.build_tree_dirs.empty()) {
    system_dirs = options.build_tree_dirs;
    system_origin = ManifestOrigin::build_tree;
  } else if (options.use_default_dirs && system_dirs.empty()) {
    if (running_from_build_tree()) {
      system_dirs = build_tree_plugin_dirs();
      system_origin = ManifestOrigin::build_tree;
    } else {
      system_dirs = {installed_plugin_dir()};
    }
  }
  for (const auto& dir : system_dirs)
    for (auto& file : json_files_in(dir)) files.emplace_back(std::move(file), system_origin);
  return files;
}

Registry Registry::discover(const DiscoveryOptions& options) {
  Registry registry = scan(options);
  registry.load();
  return registry;
}

Registry Registry::scan(const DiscoveryOptions& options) {
  Registry registry;
  std::vector<std::string> disabled;
  if (auto globs = lever_raw("METRALE_BACKENDS_DISABLE")) disabled = split(*globs, ',');
  if (process_is_elevated())
    logger()->warn("elevated privileges: METRALE_MANIFESTS, METRALE_PLUGIN_PATH and other path levers are ignored");

  std::set<std::string, std::less<>> claimed;    // backends whose first manifest was found
  for (auto& [file, origin] : discover_manifest_files(options)) {
    RegistryEntry entry;
    entry.manifest_path = file;
    entry.origin = origin;
    try {
      scan_entry(entry, disabled, claimed);
    } catch (const std::exception& e) {  // scanning promises an entry, never an exception
      entry.state = EntryState::invalid;
      entry.reason = entry.manifest_path.string() + ": " + e.what();
      logger()->warn("{}", entry.reason);
    }
    registry.entries_.push_back(std::move(entry));
  }
  return registry;
}

void Registry::load() {
  for (auto& entry : entries_) {
    if (entry.state != EntryState::pending) continue;
    load_entry(entry, audit_);
    if (entry.state == EntryState::failed) logger()->warn("{}", entry.reason);
    else if (entry.state == EntryState::unavailable)
      logger()->info("backend {} unavailable: {}", entry.backend, entry.reason);
    for (const auto& line : entry.cross_check)
      logger()->warn("{}: manifest/plugin cross-check: {}", entry.manifest_path.string(), line);
  }
}

std::shared_ptr<Backend> Registry::find(std::string_view backend) const {
  for (const auto& entry : entries_)
    if (entry.state == EntryState::loaded && entry.backend == backend) return entry.instance;
  return nullptr;
}

namespace {

// The backend asked for by name (`requested`, else METRALE_BACKEND when set) and how it was asked.
std::optional<std::pair<std::string, std::string>> requested_backend(const std::optional<std::string>& requested) {
  if (requested) return std::pair{*requested, std::string("requested backend")};
  if (auto lever = lever_raw("METRALE_BACKEND"); lever && !lever->empty())
    return std::pair{*lever, "METRALE_BACKEND=" + *lever};
  return std::nullopt;
}

}  // namespace

const RegistryEntry* Registry::entry_naming(std::string_view backend) const {
  // A manifest that parsed says more than an invalid one that merely carries the name.
  const RegistryEntry* found = nullptr;
  for (const auto& entry : entries_) {
    if (entry.backend != backend || entry.state == EntryState::shadowed) continue;
    if (entry.manifest) return &entry;
    if (!found) found = &entry;
  }
  return found;
}

std::string Registry::unusable_reason(std::string_view backend) const {
  const RegistryEntry* entry = entry_naming(backend);
  if (entry == nullptr) {
    std::vector<std::string_view> names;
    for (const auto& e : entries_)
      if (!e.backend.empty()) names.push_back(e.backend);
    std::string why = "no manifest names it";
    if (auto near = likely_typo_of(backend, names)) why += "; did you mean '" + *near + "'?";
    return why;
  }
  const std::string manifest = entry->manifest_path.string();
  switch (entry->state) {
    case EntryState::disabled: return "disabled by " + disabled_by();
    case EntryState::invalid: return "its manifest " + manifest + " is invalid: " + entry->reason;
    case EntryState::skipped: return "its manifest " + manifest + " was skipped: " + entry->reason;
    case EntryState::pending: return "pending: its plugin is not loaded yet";
    default: return std::string(entry_state_name(entry->state)) + ": " + entry->reason;
  }
}

void Registry::require_loadable(std::optional<std::string> requested) const {
  auto asked = requested_backend(requested);
  if (!asked) return;
  if (const RegistryEntry* entry = entry_naming(asked->first)) {
    switch (entry->state) {
      case EntryState::pending:
      case EntryState::loaded: return;
      default: break;
    }
  }
  throw Refusal(asked->second + ": backend '" + asked->first + "' cannot be used (" + unusable_reason(asked->first) +
                "). Backends: " + summary());
}

std::shared_ptr<Backend> Registry::select(std::optional<std::string> requested) const {
  if (auto asked = requested_backend(requested)) {
    if (auto backend = find(asked->first)) return backend;
    throw Refusal(asked->second + ": backend '" + asked->first + "' cannot be used (" + unusable_reason(asked->first) +
                  "). Backends: " + summary());
  }
  std::shared_ptr<Backend> best;
  int best_priority = 0;
  for (const auto& entry : entries_) {
    if (entry.state != EntryState::loaded) continue;
    if (!best || entry.priority > best_priority) best = entry.instance, best_priority = entry.priority;
  }
  if (!best) throw Error(Status::unavailable, "no backend could be loaded. Backends: " + summary());
  return best;
}

std::string Registry::summary() const {
  std::string out;
  for (const auto& entry : entries_) {
    std::string name = entry.backend.empty() ? entry.manifest_path.filename().string() : entry.backend;
    out += (out.empty() ? "" : ", ") + name + " (" + entry_state_name(entry.state) + ")";
  }
  return out.empty() ? std::string("none found") : out;
}

Extension Registry::extension(std::string_view backend, std::string_view name) const {
  const std::string what = "extension '" + std::string(name) + "' of backend '" + std::string(backend) + "'";
  // A usable entry first; else the first that names the backend, for its reason.
  const RegistryEntry* found = nullptr;
  for (const auto& entry : entries_) {
    if (entry.backend != backend || entry.state == EntryState::shadowed) continue;
    const bool usable = entry.state == EntryState::loaded || entry.state == EntryState::unavailable;
    if (usable || found == nullptr) found = &entry;
    if (usable) break;
  }
  if (found == nullptr) throw Refusal(what + ": no manifest names the backend. Backends: " + summary());
  switch (found->state) {
    case EntryState::loaded:
    case EntryState::unavailable:
      break;
    case EntryState::disabled:
      throw Refusal(what + ": the backend is disabled by " + disabled_by());
    case EntryState::pending:
      throw Error(Status::internal, what + ": Registry::extension() called before load()");
    default:
      throw Refusal(what + ": the backend cannot be used (" + entry_state_name(found->state) + ": " + found->reason + ")");
  }
  const std::string plugin = "plugin " + found->manifest->library.string() + " (manifest " +
                             found->manifest_path.string() + ")";
  if (!found->library->offers_extensions())
    throw Error(Status::unimplemented, what + ": " + plugin + " offers no extensions (its function table has no "
                                                 "get_proc_address)");
  void* address = found->library->proc_address(std::string(name));
  if (address == nullptr)
    throw Error(Status::unimplemented, what + ": " + plugin + " offers no extension of that name");
  return Extension{address, std::shared_ptr<const void>(found->library, found->library.get()), *found->manifest};
}

}  // namespace metrale
