// SPDX-License-Identifier: MIT OR Apache-2.0
// Plugin manifests: parsing and strict validation (docs/manifest.md, manifests/manifest.schema.json).
// A manifest that fails validation yields problems, each naming the file, the JSON pointer and
// what was expected; it never yields a partial Manifest.
#pragma once

#include <metrale/levers.hpp>
#include <metrale/plugin_abi.h>
#include <metrale/target.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace metrale {

// The manifest format this runtime reads: major must match, a newer minor is accepted.
inline constexpr int kManifestFormatMajor = 1;
inline constexpr int kManifestFormatMinor = 0;

struct KernelParam {
  std::string name;
  metrale_param_type type;
};

struct ManifestKernel {
  std::string name;
  std::vector<KernelParam> params;
  std::optional<std::string> min_target;   // gated on a device below it (target.hpp)
  std::vector<std::string> cpu_features;   // gated on a device whose target tier lacks one
  std::optional<std::string> weight_layout;  // layout of weights the kernel expects
};

struct ManifestModule {
  std::string name;
  std::optional<std::string> source;  // JIT backends: file in a kernel source dir
  std::vector<ManifestKernel> kernels;
};

// The option value that makes a lever choose the device (create_info.device_index) instead of
// becoming a create() option.
inline constexpr std::string_view kDeviceIndexOption = "device_index";

// A lever the manifest declares (docs/manifest.md, "Levers"): the runtime registers it, validates
// its value and passes it to create() as option `option` (or as the device index).
struct ManifestLever {
  std::string name;          // METRALE_...
  std::string option;        // create() option key, or kDeviceIndexOption
  LeverType type = LeverType::string;
  std::string default_text;  // shown by `metrale levers`
  std::string meaning;
  std::vector<std::string> choices;  // type choice only
  bool path_like = false;    // read with secure_getenv: ignored in elevated processes
};

struct Manifest {
  std::filesystem::path path;          // the manifest file itself (absolute)
  std::string text;                    // its bytes, handed to the plugin at create()
  int format_major = 0;
  int format_minor = 0;
  std::string backend;                 // backend name
  std::filesystem::path library;       // absolute, resolved against the manifest's directory
  uint32_t abi_version = 0;
  int priority = 0;
  std::string description;
  std::optional<std::string> library_checksum;  // "xxh3-64:<16 hex>" pin, optional
  std::vector<ManifestLever> levers;
  std::vector<TargetTier> target_tiers;
  std::vector<ManifestModule> modules;

  const ManifestKernel* find_kernel(std::string_view module, std::string_view name) const;
  size_t kernel_count() const;
};

struct ManifestProblem {
  std::filesystem::path file;
  std::string pointer;   // JSON pointer of the offending value ("" for the whole document)
  std::string message;   // what was expected / what was wrong
  // "<file>: <pointer>: <message>" — the one line the user sees.
  std::string to_string() const;
};

struct ManifestResult {
  std::optional<Manifest> manifest;     // set only when problems is empty
  std::vector<ManifestProblem> problems;
  bool skipped_format = false;          // unknown format major: skip with a message, not an error
  // Without a manifest: the document's "backend" string, when it has one (so that asking for that
  // backend is told its manifest is invalid); "" when it has none or the file could not be read.
  std::string backend;
};

// Reads, parses and validates one manifest file. Never throws.
ManifestResult load_manifest(const std::filesystem::path& file);
// Same, from text already in memory (file is used for messages and relative paths).
ManifestResult parse_manifest(const std::filesystem::path& file, const std::string& text);

// "ptr" <-> METRALE_PARAM_PTR, ...; nullopt for an unknown name.
std::optional<metrale_param_type> param_type_from_name(std::string_view name);
const char* param_type_name(metrale_param_type type);

}  // namespace metrale
