// SPDX-License-Identifier: MIT OR Apache-2.0
// Registry: discovers manifests (docs/architecture.md, "Discovery"), declares the levers they
// declare, loads their plugins, checks manifest against plugin, selects a backend and looks up
// plugin extensions. Every manifest found has an entry saying what happened to it; nothing is
// dropped silently. Not thread-safe during scan() and load(); const use after.
#pragma once

#include <metrale/audit.hpp>
#include <metrale/backend.hpp>
#include <metrale/manifest.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace metrale {

class PluginLibrary;

// Where a manifest came from, in discovery order.
enum class ManifestOrigin { explicit_list, added, plugin_path, user_data, installed, build_tree };
const char* manifest_origin_name(ManifestOrigin origin) noexcept;

enum class EntryState {
  pending,       // found and valid, its levers declared; load() has not run yet
  loaded,        // plugin loaded and an instance created
  unavailable,   // plugin loaded but reports it cannot run here (no driver, no device)
  disabled,      // matched METRALE_BACKENDS_DISABLE
  shadowed,      // an earlier manifest already named this backend
  invalid,       // manifest failed validation, or declares a lever another declarer has otherwise
  skipped,       // unknown manifest format major
  failed,        // library missing, not loadable, bad entry point, handshake or create failed
};
const char* entry_state_name(EntryState state) noexcept;

struct RegistryEntry {
  std::filesystem::path manifest_path;
  ManifestOrigin origin = ManifestOrigin::installed;
  std::string backend;            // from the manifest (an invalid one: its "backend" string, if any)
  int priority = 0;
  EntryState state = EntryState::failed;
  std::string reason;             // one precise line when state != loaded
  std::vector<std::string> cross_check;  // manifest <-> plugin disagreements
  std::shared_ptr<Backend> instance;     // set when loaded
  std::optional<Manifest> manifest;
  // The handshaked library, kept when create() failed too (extensions need no instance).
  std::shared_ptr<PluginLibrary> library;
};

// A plugin extension entry point (metrale_plugin_table.get_proc_address) and what it belongs to.
struct Extension {
  void* address = nullptr;             // cast to the type the plugin documents for the name
  std::shared_ptr<const void> owner;   // keeps the plugin library loaded while held
  Manifest manifest;                   // of the backend that offered it

  template <class Fn>
  Fn as() const noexcept {
    return reinterpret_cast<Fn>(address);
  }
};

struct DiscoveryOptions {
  // Replace the lever-driven search (tests). Empty: use levers and the default directories.
  std::optional<std::vector<std::filesystem::path>> manifests;
  std::vector<std::filesystem::path> installed_dirs;  // default: the build's install dir
  std::vector<std::filesystem::path> build_tree_dirs;  // default: build dirs when uninstalled
  bool use_default_dirs = true;
};

class Registry {
 public:
  // scan() then load(). Never throws for a bad manifest or plugin: it becomes an entry.
  static Registry discover(const DiscoveryOptions& options = {});
  // Finds and validates every manifest and declares the levers of each one that is not shadowed
  // (disabled ones included, so their levers are known); loads nothing (entries are pending).
  static Registry scan(const DiscoveryOptions& options = {});
  // Loads the plugin of every pending entry: handshake, create() with the options its manifest's
  // levers yield, cross-check. A plugin that fails in any way (an exception escaping it
  // included) becomes a failed entry; only a lever value that does not parse throws (Refusal).
  void load();

  const std::vector<RegistryEntry>& entries() const noexcept { return entries_; }
  // The loaded backend of that name, or nullptr.
  std::shared_ptr<Backend> find(std::string_view backend) const;
  // METRALE_BACKEND (or `requested` when given) if set — throwing Refusal when it is not
  // loaded, with the reason and the list of backends that exist — else the loaded backend with
  // the highest priority. Throws Error(unavailable) when none loaded.
  std::shared_ptr<Backend> select(std::optional<std::string> requested = std::nullopt) const;
  // After scan() alone: throws the Refusal select() would for a backend asked for by name
  // (`requested`, else METRALE_BACKEND) that cannot load whatever load() does: no manifest names
  // it (with "did you mean"), or its manifest is invalid or skipped, or it is disabled. Loads nothing.
  void require_loadable(std::optional<std::string> requested = std::nullopt) const;
  std::shared_ptr<AuditLog> audit() const noexcept { return audit_; }

  // The extension entry point `name` of `backend`'s plugin, which needs the library but no
  // instance: a backend that is loaded or unavailable (no device here) offers it. Throws Refusal
  // when the backend is disabled by METRALE_BACKENDS_DISABLE (naming the lever and its value), has
  // no manifest, or is invalid, skipped or failed (with the entry's reason); Error(unimplemented)
  // when its plugin offers no extension of that name.
  Extension extension(std::string_view backend, std::string_view name) const;

 private:
  std::string summary() const;
  // The entry a backend name refers to: not shadowed, a parsed manifest first; nullptr when none.
  const RegistryEntry* entry_naming(std::string_view backend) const;
  // Why no loaded backend answers to `backend`: the entry's real cause, or "no manifest names it".
  std::string unusable_reason(std::string_view backend) const;

  std::vector<RegistryEntry> entries_;
  std::shared_ptr<AuditLog> audit_ = std::make_shared<AuditLog>();
};

// The manifest files discovery would consider, in order, with their origin.
std::vector<std::pair<std::filesystem::path, ManifestOrigin>> discover_manifest_files(
    const DiscoveryOptions& options);

}  // namespace metrale
