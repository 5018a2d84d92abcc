// SPDX-License-Identifier: MIT OR Apache-2.0
// The public face of manifests: reading a manifest file (bounded), parsing and validating it
// (manifest_validator.cpp), and the Manifest accessors.
#include <metrale/manifest.hpp>

#include "json_reader.hpp"
#include "json_text.hpp"
#include "manifest_validator.hpp"

#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include <exception>
#include <string_view>

namespace metrale {

namespace {

using manifest_detail::one_problem;
using json_text::sanitize_utf8;

// A manifest is a few kilobytes (a thousand kernels fit in one megabyte): the cap keeps a wrong
// path (a huge file) from eating memory.
constexpr std::size_t kMaxManifestBytes = std::size_t{4} << 20;

// The "backend" string of a document that is not a valid manifest, if it has one.
std::string backend_named_in(const std::string& text) {
  const json_text::JsonReadResult doc = json_text::read_json(text);
  if (doc.error || !doc.root.is_object()) return {};
  const auto it = doc.root.find("backend");
  return it != doc.root.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

const ManifestKernel* Manifest::find_kernel(std::string_view module, std::string_view name) const {
  for (const ManifestModule& mod : modules) {
    if (mod.name != module) continue;
    for (const ManifestKernel& k : mod.kernels) {
      if (k.name == name) return &k;
    }
  }
  return nullptr;
}

size_t Manifest::kernel_count() const {
  size_t n = 0;
  for (const ManifestModule& mod : modules) n += mod.kernels.size();
  return n;
}

std::string ManifestProblem::to_string() const {
  return file.string() + ": " + (pointer.empty() ? std::string("(document)") : pointer) + ": " +
         message;
}

std::optional<metrale_param_type> param_type_from_name(std::string_view name) {
  metrale_param_type type;
  if (metrale_param_type_parse(std::string(name).c_str(), &type)) return type;
  return std::nullopt;
}

const char* param_type_name(metrale_param_type type) {
  const char* name = metrale_param_type_name(type);
  return name ? name : "unknown";
}

ManifestResult parse_manifest(const std::filesystem::path& file, const std::string& text) {
  // Never throws: an allocation failure or a library bug still comes back as a problem.
  try {
    ManifestResult result = manifest_detail::parse_and_validate(file, text);
    if (!result.manifest) result.backend = backend_named_in(text);
    return result;
  } catch (const std::exception& e) {
    return one_problem(file, std::string("internal error while reading the manifest: ") +
                                 sanitize_utf8(e.what()));
  } catch (...) {
    return one_problem(file, "internal error while reading the manifest");
  }
}

ManifestResult load_manifest(const std::filesystem::path& file) {
  try {
    std::string text;
    try {
      text = read_regular_file(file, "manifest", kMaxManifestBytes);
    } catch (const Error& e) {
      // The problem names the file already: keep the reason only.
      std::string_view reason = e.what();
      if (const std::string prefix = file.string() + ": "; reason.starts_with(prefix)) reason.remove_prefix(prefix.size());
      return one_problem(file, std::string(reason));
    }
    return parse_manifest(file, text);
  } catch (const std::exception& e) {
    return one_problem(file, std::string("internal error while reading the manifest: ") +
                                 sanitize_utf8(e.what()));
  } catch (...) {
    return one_problem(file, "internal error while reading the manifest");
  }
}

}  // namespace metrale
