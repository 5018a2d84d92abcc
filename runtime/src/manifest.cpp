// SPDX-License-Identifier: MIT OR Apache-2.0
// The public face of manifests: reading a manifest file (bounded), parsing and validating it
// (manifest_validator.cpp), and the Manifest accessors.
#include <metrale/manifest.hpp>

#include "json_text.hpp"
#include "manifest_validator.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <memory>
#include <system_error>

namespace metrale {

namespace {

namespace fs = std::filesystem;
using manifest_detail::one_problem;
using json_text::sanitize_utf8;

// Reading stops here: a manifest is a few kilobytes, and a cap keeps a wrong path (a device,
// a huge file) from eating memory.
constexpr std::size_t kMaxManifestBytes = std::size_t{16} << 20;

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
    return manifest_detail::parse_and_validate(file, text);
  } catch (const std::exception& e) {
    return one_problem(file, std::string("internal error while reading the manifest: ") +
                                 sanitize_utf8(e.what()));
  } catch (...) {
    return one_problem(file, "internal error while reading the manifest");
  }
}

ManifestResult load_manifest(const std::filesystem::path& file) {
  try {
    std::error_code ec;
    const fs::file_status st = fs::status(file, ec);
    if (ec) {
      return one_problem(file, "cannot read the manifest: " + ec.message());
    }
    if (fs::is_directory(st)) {
      return one_problem(file, "cannot read the manifest: it is a directory, not a file");
    }
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(file.c_str(), "rb"),
                                                      &std::fclose);
    if (!f) {
      return one_problem(file, "cannot read the manifest: " +
                                   std::error_code(errno, std::generic_category()).message());
    }
    std::string text;
    std::array<char, 65536> buf{};
    for (;;) {
      const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
      text.append(buf.data(), n);
      if (text.size() > kMaxManifestBytes) {
        return one_problem(file, "cannot read the manifest: larger than " +
                                     std::to_string(kMaxManifestBytes >> 20) + " MiB");
      }
      if (n < buf.size()) break;
    }
    if (std::ferror(f.get())) {
      return one_problem(file, "cannot read the manifest: " +
                                   std::error_code(errno, std::generic_category()).message());
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
