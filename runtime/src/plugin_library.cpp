// SPDX-License-Identifier: MIT OR Apache-2.0
#include "plugin_library.hpp"

#include "plugin_guard.hpp"

#include <metrale/log.hpp>

#include <xxhash.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <tuple>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace metrale {

namespace {

// Required table fields, by name, so a plugin that leaves one NULL is told which.
struct RequiredField {
  const char* name;
  bool (*present)(const metrale_plugin_table&);
};

#define METRALE_FIELD(field) {#field, [](const metrale_plugin_table& t) { return t.field != nullptr; }}
constexpr std::array<RequiredField, 18> kRequiredFields{{
    METRALE_FIELD(describe),       METRALE_FIELD(device_count),   METRALE_FIELD(create),
    METRALE_FIELD(destroy),        METRALE_FIELD(last_error),     METRALE_FIELD(device_info),
    METRALE_FIELD(list_kernels),   METRALE_FIELD(get_kernel),     METRALE_FIELD(mem_alloc),
    METRALE_FIELD(mem_free),       METRALE_FIELD(copy_to_device), METRALE_FIELD(copy_to_host),
    METRALE_FIELD(copy_device),    METRALE_FIELD(memset_device),  METRALE_FIELD(stream_create),
    METRALE_FIELD(stream_destroy), METRALE_FIELD(stream_synchronize), METRALE_FIELD(launch),
}};
#undef METRALE_FIELD

bool is_elf(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  return in.gcount() == 4 && magic == std::array<char, 4>{'\x7f', 'E', 'L', 'F'};
}

std::string describe_library(const Manifest& manifest) {
  return "plugin library " + manifest.library.string() + " (manifest " + manifest.path.string() + ", /library)";
}

}  // namespace

std::string file_checksum(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(Status::not_found, "cannot read " + file.string());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_64bits_update(state, buffer.data(), static_cast<size_t>(in.gcount()));
  }
  XXH64_hash_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "xxh3-64:%016llx", static_cast<unsigned long long>(hash));
  return text.data();
}

namespace {

// The file exists, is ELF, matches the checksum pin; the manifest's ABI version is one we speak.
void check_library_file(const Manifest& manifest) {
  const fs::path& file = manifest.library;
  std::error_code error;
  if (!fs::exists(file, error))
    throw Error(Status::not_found, describe_library(manifest) + ": file does not exist");
  if (!fs::is_regular_file(file, error) || !is_elf(file))
    throw Error(Status::incompatible, describe_library(manifest) + ": not an ELF shared object");
  if (manifest.library_checksum) {
    std::string actual = file_checksum(file);
    if (actual != *manifest.library_checksum)
      throw Error(Status::incompatible, describe_library(manifest) + ": checksum " + actual +
                                            " does not match the manifest's pin " + *manifest.library_checksum +
                                            " (/library_checksum)");
  }
  if (manifest.abi_version < METRALE_ABI_VERSION_MIN || manifest.abi_version > METRALE_ABI_VERSION)
    throw Error(Status::incompatible, "manifest " + manifest.path.string() + ": /abi_version is " +
                                          std::to_string(manifest.abi_version) + "; this runtime speaks " +
                                          std::to_string(METRALE_ABI_VERSION_MIN) + ".." +
                                          std::to_string(METRALE_ABI_VERSION));
}

// What the plugin's table must satisfy once the handshake chose `chosen`.
void check_table(const Manifest& manifest, const metrale_plugin_table* table, uint32_t chosen) {
  if (table == nullptr)
    throw Error(Status::incompatible, describe_library(manifest) + ": " + METRALE_PLUGIN_ENTRY_SYMBOL +
                                          " returned OK with a null function table");
  // Fields appended after version 1 are optional: a table that ends before them is complete.
  if (table->struct_size < METRALE_PLUGIN_TABLE_V1_SIZE)
    throw Error(Status::incompatible, describe_library(manifest) + ": function table struct_size " +
                                          std::to_string(table->struct_size) + " is smaller than ABI " +
                                          std::to_string(chosen) + "'s " +
                                          std::to_string(METRALE_PLUGIN_TABLE_V1_SIZE));
  if (table->abi_version != chosen)
    throw Error(Status::incompatible, describe_library(manifest) + ": table says ABI " +
                                          std::to_string(table->abi_version) + " but the handshake chose " +
                                          std::to_string(chosen));
  if (chosen != manifest.abi_version)
    throw Error(Status::incompatible, describe_library(manifest) + ": plugin negotiated ABI " +
                                          std::to_string(chosen) + " but the manifest declares /abi_version " +
                                          std::to_string(manifest.abi_version));
  for (const auto& field : kRequiredFields)
    if (!field.present(*table))
      throw Error(Status::incompatible,
                  describe_library(manifest) + ": required table entry '" + field.name + "' is NULL");
}

using EntryFn = metrale_status(uint32_t, uint32_t, uint32_t*, const metrale_plugin_table**);

// The version handshake: the plugin's table, checked, and the version it chose.
std::pair<const metrale_plugin_table*, uint32_t> handshake(const Manifest& manifest, EntryFn& entry) {
  uint32_t chosen = 0;
  const metrale_plugin_table* table = nullptr;
  const std::string label = describe_library(manifest);
  const metrale_status status = PluginGuard(label, nullptr).invoke(
      METRALE_PLUGIN_ENTRY_SYMBOL, [&] { return entry(METRALE_ABI_VERSION_MIN, METRALE_ABI_VERSION, &chosen, &table); });
  std::string range = std::to_string(METRALE_ABI_VERSION_MIN) + ".." + std::to_string(METRALE_ABI_VERSION);
  if (status != METRALE_STATUS_OK) {
    throw Error(status_from_abi(status),
                describe_library(manifest) + ": version handshake refused (" +
                    std::string(status_name(status_from_abi(status))) + "): the plugin speaks ABI " +
                    std::to_string(chosen) + ", this runtime speaks " + range);
  }
  if (chosen < METRALE_ABI_VERSION_MIN || chosen > METRALE_ABI_VERSION)
    throw Error(Status::incompatible, describe_library(manifest) + ": plugin chose ABI " + std::to_string(chosen) +
                                          ", outside the offered " + range);
  check_table(manifest, table, chosen);
  return {table, chosen};
}

}  // namespace

std::shared_ptr<PluginLibrary> PluginLibrary::open(const Manifest& manifest) {
  check_library_file(manifest);
  auto plugin = std::shared_ptr<PluginLibrary>(new PluginLibrary());
  plugin->path_ = manifest.library;
  boost::dll::fs::error_code load_error;
  plugin->library_.load(manifest.library, boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now,
                        load_error);
  if (load_error)
    throw Error(Status::incompatible, describe_library(manifest) + ": cannot be loaded: " + load_error.message());
  if (!plugin->library_.has(METRALE_PLUGIN_ENTRY_SYMBOL))
    throw Error(Status::incompatible, describe_library(manifest) + ": no exported symbol " +
                                          METRALE_PLUGIN_ENTRY_SYMBOL + " (the plugin entry point)");
  std::tie(plugin->table_, plugin->abi_version_) =
      handshake(manifest, plugin->library_.get<EntryFn>(METRALE_PLUGIN_ENTRY_SYMBOL));

  metrale_plugin_info info{};
  info.struct_size = sizeof(info);
  const std::string label = describe_library(manifest);
  const PluginGuard guard(label, plugin->table_);
  const metrale_status status = guard.invoke("describe()", [&] { return plugin->table_->describe(&info); });
  if (status != METRALE_STATUS_OK) throw guard.failed("describe()", status, "(no instance: describe() has no message)");
  if (info.backend_name == nullptr)
    throw Error(Status::internal, label + ": describe() answered OK without a backend name");
  plugin->backend_name_ = info.backend_name;
  plugin->version_ = info.version ? info.version : "";
  plugin->description_ = info.description ? info.description : "";
  plugin->host_ = metrale_host_callbacks{sizeof(metrale_host_callbacks), nullptr, &plugin_log_callback};
  plugin->host_.user = const_cast<char*>(plugin->backend_name_.c_str());
  if (plugin->backend_name_ != manifest.backend)
    throw Error(Status::incompatible, describe_library(manifest) + ": plugin says it is backend '" +
                                          plugin->backend_name_ + "' but the manifest's /backend is '" +
                                          manifest.backend + "'");
  return plugin;
}

bool PluginLibrary::offers_extensions() const noexcept {
  return METRALE_STRUCT_HAS(metrale_plugin_table, table_, get_proc_address) && table_->get_proc_address != nullptr;
}

void* PluginLibrary::proc_address(const std::string& name) const {
  if (!offers_extensions()) return nullptr;
  const std::string label = "plugin library " + path_.string();
  return PluginGuard(label, table_).invoke("get_proc_address(\"" + name + "\")",
                                           [&] { return table_->get_proc_address(name.c_str()); });
}

}  // namespace metrale
