// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest validation. The rules are documented in docs/manifest.md and mirrored by
// manifests/manifest.schema.json (tests/manifest checks that both agree).
#include "manifest_validator.hpp"

#include "json_reader.hpp"
#include "json_text.hpp"

#include <metrale/names.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace metrale::manifest_detail {

using namespace metrale::json_text;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Lexical rules shared with the JSON Schema (keep the two in step).

bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || !alpha(s.front())) {
    return false;
  }
  return std::all_of(s.begin() + 1, s.end(), [&](char c) { return alpha(c) || digit(c); });
}

bool is_backend_name(std::string_view s) {
  if (s.empty() || s.size() > 32 || !(s.front() >= 'a' && s.front() <= 'z')) {
    return false;
  }
  return std::all_of(s.begin() + 1, s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

bool is_checksum(std::string_view s) {
  constexpr std::string_view prefix = "xxh3-64:";
  if (s.size() != prefix.size() + 16 || s.substr(0, prefix.size()) != prefix) {
    return false;
  }
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(prefix.size()), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Any '/'-separated component equal to "..": checked on the text, exactly as the schema's
// pattern does, so "a..b" and "..a" are fine.
bool has_dotdot_component(std::string_view s) {
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find('/', start);
    if (end == std::string_view::npos) end = s.size();
    if (s.substr(start, end - start) == "..") {
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool is_absolute_text(std::string_view s) { return !s.empty() && s.front() == '/'; }

// "MAJOR.MINOR", decimal, no sign and no leading zeros.
struct FormatVersion {
  std::string_view major_text;
  unsigned long long major = 0;
  bool major_overflow = false;
  int minor = 0;
};

bool is_version_number(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return s.size() == 1 || s.front() != '0';
}

std::optional<FormatVersion> parse_format_version(std::string_view s) {
  const std::size_t dot = s.find('.');
  if (dot == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view major = s.substr(0, dot);
  const std::string_view minor = s.substr(dot + 1);
  if (!is_version_number(major) || !is_version_number(minor)) {
    return std::nullopt;
  }
  FormatVersion v;
  v.major_text = major;
  v.major_overflow =
      std::from_chars(major.data(), major.data() + major.size(), v.major).ec != std::errc{};
  unsigned long long minor_value = 0;
  const bool minor_overflow =
      std::from_chars(minor.data(), minor.data() + minor.size(), minor_value).ec != std::errc{};
  // A minor too large for int is still "newer than 0": clamp instead of failing.
  v.minor = (minor_overflow || minor_value > static_cast<unsigned long long>(INT_MAX))
                ? INT_MAX
                : static_cast<int>(minor_value);
  return v;
}

// JSON numbers are mathematical values: 3.0 and 3e0 are the integer 3 (as in JSON Schema).
enum class IntegerKind { not_integer, integer };
struct IntegerValue {
  IntegerKind kind = IntegerKind::not_integer;
  bool fits = false;   // within long long
  long long value = 0;
};

IntegerValue integer_value(const Json& v) {
  IntegerValue out;
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    out = {IntegerKind::integer, true, v.get<long long>()};
  } else if (v.is_number_unsigned()) {
    const auto u = v.get<unsigned long long>();
    out.kind = IntegerKind::integer;
    out.fits = u <= static_cast<unsigned long long>(LLONG_MAX);
    out.value = out.fits ? static_cast<long long>(u) : 0;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d) {
      out.kind = IntegerKind::integer;
      // 2^63 is exactly representable; everything below it converts without overflow.
      out.fits = d >= -9223372036854775808.0 && d < 9223372036854775808.0;
      out.value = out.fits ? static_cast<long long>(d) : 0;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Validation

struct KeySpec {
  std::string_view name;
  bool required;
  std::string_view expected;  // for "missing required key" messages
};

constexpr std::array kRootKeys{
    KeySpec{"format_version", true, "a version string \"MAJOR.MINOR\" such as \"1.0\""},
    KeySpec{"backend", true, "a backend name string such as \"cpu\""},
    KeySpec{"library", true, "a library path string"},
    KeySpec{"abi_version", true, "an integer from 1 to 4294967295"},
    KeySpec{"priority", true, "an integer from -1000 to 1000"},
    KeySpec{"description", false, "a string"},
    KeySpec{"library_checksum", false, "a string \"xxh3-64:<16 hex digits>\""},
    KeySpec{"targets", false, "an array of strings"},
    KeySpec{"modules", true, "an array of module objects (may be empty)"},
};
constexpr std::array kModuleKeys{
    KeySpec{"name", true, "an identifier string"},
    KeySpec{"source", false, "a relative file name"},
    KeySpec{"kernels", true, "an array of kernel objects"},
};
constexpr std::array kKernelKeys{
    KeySpec{"name", true, "an identifier string"},
    KeySpec{"params", true, "an array of parameter objects"},
    KeySpec{"min_target", false, "a non-empty string"},
    KeySpec{"cpu_features", false, "an array of non-empty strings"},
    KeySpec{"weight_layout", false, "a non-empty string"},
};
constexpr std::array kParamKeys{
    KeySpec{"name", true, "an identifier string"},
    KeySpec{"type", true, "one of ptr, u32, i32, u64, i64, f32, f64"},
};

constexpr std::string_view kIdentifierRule = "an identifier ([A-Za-z_][A-Za-z0-9_]*)";

class Validator {
 public:
  Validator(fs::path file, fs::path manifest_dir, bool strict)
      : file_(std::move(file)), manifest_dir_(std::move(manifest_dir)), strict_(strict) {}

  std::vector<ManifestProblem>& problems() { return problems_; }

  void problem(std::string pointer, std::string message) {
    problems_.push_back(ManifestProblem{file_, std::move(pointer), std::move(message)});
  }

  void expected(const std::string& pointer, std::string_view what, const Json& found) {
    problem(pointer, "expected " + std::string(what) + ", found " + describe(found));
  }

  // Walks an object's members in document order: known keys go to on_member, unknown keys are
  // problems under strict rules, and missing required keys are reported last.
  template <std::size_t N, class OnMember>
  bool walk_object(const Json& v, const std::string& pointer, std::string_view what,
                   const std::array<KeySpec, N>& keys, OnMember&& on_member) {
    if (!v.is_object()) {
      expected(pointer, what, v);
      return false;
    }
    std::array<bool, N> seen{};
    for (const auto& [key, value] : v.items()) {
      const auto it = std::find_if(keys.begin(), keys.end(),
                                   [&](const KeySpec& k) { return k.name == key; });
      if (it == keys.end()) {
        if (strict_) unknown_key(child(pointer, key), key, keys);
        continue;
      }
      seen[static_cast<std::size_t>(it - keys.begin())] = true;
      on_member(it->name, value, child(pointer, key));
    }
    for (std::size_t i = 0; i < N; ++i) {
      if (keys[i].required && !seen[i]) {
        problem(pointer, "missing required key \"" + std::string(keys[i].name) + "\" (expected " +
                             std::string(keys[i].expected) + ")");
      }
    }
    return true;
  }

  template <std::size_t N>
  void unknown_key(const std::string& pointer, const std::string& key,
                   const std::array<KeySpec, N>& keys) {
    std::string message = "unknown key " + quote_short(key) +
                          " (format 1.0 allows no unknown keys; ";
    std::vector<std::string_view> names;
    for (const KeySpec& k : keys) names.push_back(k.name);
    // Close enough to be a typo: name it; otherwise list what is allowed here.
    if (auto typo = likely_typo_of(key, names)) {
      message += "did you mean \"" + *typo + "\"?)";
    } else {
      message += "known keys here: ";
      for (std::size_t i = 0; i < N; ++i) {
        message += (i ? ", " : "") + std::string(keys[i].name);
      }
      message += ")";
    }
    problem(pointer, std::move(message));
  }

  std::optional<std::string> string_value(const Json& v, const std::string& pointer,
                                          std::string_view what, bool non_empty) {
    if (!v.is_string() || (non_empty && v.get_ref<const std::string&>().empty())) {
      expected(pointer, what, v);
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  std::optional<std::string> identifier(const Json& v, const std::string& pointer) {
    if (!v.is_string() || !is_identifier(v.get_ref<const std::string&>())) {
      expected(pointer, kIdentifierRule, v);
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  std::optional<long long> integer_in(const Json& v, const std::string& pointer, long long min,
                                      long long max, std::string_view what) {
    const IntegerValue iv = integer_value(v);
    if (iv.kind != IntegerKind::integer) {
      expected(pointer, "an integer", v);
      return std::nullopt;
    }
    if (!iv.fits || iv.value < min || iv.value > max) {
      expected(pointer, what, v);
      return std::nullopt;
    }
    return iv.value;
  }

  std::vector<std::string> string_array(const Json& v, const std::string& pointer) {
    std::vector<std::string> out;
    if (!v.is_array()) {
      expected(pointer, "an array of strings", v);
      return out;
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (auto s = string_value(v[i], child(pointer, i), "a non-empty string", true)) {
        out.push_back(std::move(*s));
      }
    }
    return out;
  }

  void root(const Json& doc, Manifest& m) {
    walk_object(doc, "", "a JSON object (the manifest)", kRootKeys,
                [&](std::string_view key, const Json& v, const std::string& p) {
                  if (key == "format_version") {
                    // Shape checked by the caller before strictness was decided.
                  } else if (key == "backend") {
                    if (!v.is_string() || !is_backend_name(v.get_ref<const std::string&>())) {
                      expected(p,
                               "a backend name: a lowercase letter, then up to 31 of a-z 0-9 _ -",
                               v);
                    } else {
                      m.backend = v.get<std::string>();
                    }
                  } else if (key == "library") {
                    library(v, p, m);
                  } else if (key == "abi_version") {
                    if (auto n = integer_in(v, p, 1, UINT32_MAX, "an integer from 1 to 4294967295")) {
                      m.abi_version = static_cast<uint32_t>(*n);
                    }
                  } else if (key == "priority") {
                    if (auto n = integer_in(v, p, -1000, 1000, "an integer from -1000 to 1000")) {
                      m.priority = static_cast<int>(*n);
                    }
                  } else if (key == "description") {
                    if (auto s = string_value(v, p, "a string", false)) m.description = *s;
                  } else if (key == "library_checksum") {
                    if (!v.is_string() || !is_checksum(v.get_ref<const std::string&>())) {
                      expected(p, "\"xxh3-64:\" followed by 16 lowercase hex digits", v);
                    } else {
                      m.library_checksum = v.get<std::string>();
                    }
                  } else if (key == "targets") {
                    string_array(v, p);  // informational: validated, not kept
                  } else if (key == "modules") {
                    modules(v, p, m);
                  }
                });
  }

  void library(const Json& v, const std::string& p, Manifest& m) {
    auto s = string_value(v, p, "a non-empty library path string", true);
    if (!s) return;
    if (!is_absolute_text(*s) && has_dotdot_component(*s)) {
      problem(p, "expected a library path inside the manifest's directory (a relative path may "
                 "not contain \"..\"), found " +
                     describe(v));
      return;
    }
    const fs::path lib(*s);
    m.library = (lib.is_absolute() ? lib : manifest_dir_ / lib).lexically_normal();
  }

  void modules(const Json& v, const std::string& p, Manifest& m) {
    if (!v.is_array()) {
      expected(p, "an array of module objects", v);
      return;
    }
    std::unordered_map<std::string, std::size_t> first;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string mp = child(p, i);
      ManifestModule mod;
      walk_object(v[i], mp, "an object (a module)", kModuleKeys,
                  [&](std::string_view key, const Json& mv, const std::string& kp) {
                    if (key == "name") {
                      if (auto name = identifier(mv, kp)) {
                        if (auto [it, fresh] = first.emplace(*name, i); !fresh) {
                          problem(kp, "duplicate module name " + quote(*name) +
                                          " (first used at " + child(p, it->second) + ")");
                        }
                        mod.name = std::move(*name);
                      }
                    } else if (key == "source") {
                      source(mv, kp, mod);
                    } else if (key == "kernels") {
                      kernels(mv, kp, mod);
                    }
                  });
      m.modules.push_back(std::move(mod));
    }
  }

  void source(const Json& v, const std::string& p, ManifestModule& mod) {
    auto s = string_value(v, p, "a non-empty source file name", true);
    if (!s) return;
    if (is_absolute_text(*s) || has_dotdot_component(*s)) {
      expected(p, "a source file name relative to a kernel source directory (not absolute, no "
                  "\"..\")",
               v);
      return;
    }
    mod.source = std::move(*s);
  }

  void kernels(const Json& v, const std::string& p, ManifestModule& mod) {
    if (!v.is_array()) {
      expected(p, "an array of kernel objects", v);
      return;
    }
    std::unordered_map<std::string, std::size_t> first;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string kp = child(p, i);
      ManifestKernel kernel;
      walk_object(v[i], kp, "an object (a kernel)", kKernelKeys,
                  [&](std::string_view key, const Json& kv, const std::string& fp) {
                    if (key == "name") {
                      if (auto name = identifier(kv, fp)) {
                        if (auto [it, fresh] = first.emplace(*name, i); !fresh) {
                          problem(fp, "duplicate kernel name " + quote(*name) +
                                          " in this module (first used at " +
                                          child(p, it->second) + ")");
                        }
                        kernel.name = std::move(*name);
                      }
                    } else if (key == "params") {
                      params(kv, fp, kernel);
                    } else if (key == "min_target") {
                      kernel.min_target = string_value(kv, fp, "a non-empty string", true);
                    } else if (key == "cpu_features") {
                      kernel.cpu_features = string_array(kv, fp);
                    } else if (key == "weight_layout") {
                      kernel.weight_layout = string_value(kv, fp, "a non-empty string", true);
                    }
                  });
      mod.kernels.push_back(std::move(kernel));
    }
  }

  void params(const Json& v, const std::string& p, ManifestKernel& kernel) {
    if (!v.is_array()) {
      expected(p, "an array of parameter objects", v);
      return;
    }
    std::unordered_map<std::string, std::size_t> first;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string pp = child(p, i);
      KernelParam param{{}, METRALE_PARAM_PTR};
      walk_object(v[i], pp, "an object (a parameter: name and type)", kParamKeys,
                  [&](std::string_view key, const Json& pv, const std::string& fp) {
                    if (key == "name") {
                      if (auto name = identifier(pv, fp)) {
                        if (auto [it, fresh] = first.emplace(*name, i); !fresh) {
                          problem(fp, "duplicate parameter name " + quote(*name) +
                                          " in this kernel (first used at " +
                                          child(p, it->second) + ")");
                        }
                        param.name = std::move(*name);
                      }
                    } else if (key == "type") {
                      std::optional<metrale_param_type> t;
                      if (pv.is_string()) t = param_type_from_name(pv.get_ref<const std::string&>());
                      if (!t) {
                        expected(fp, "one of ptr, u32, i32, u64, i64, f32, f64", pv);
                      } else {
                        param.type = *t;
                      }
                    }
                  });
      kernel.params.push_back(std::move(param));
    }
  }

 private:
  fs::path file_;
  fs::path manifest_dir_;
  bool strict_;
  std::vector<ManifestProblem> problems_;
};

fs::path absolute_normal(const fs::path& file) {
  std::error_code ec;
  fs::path abs = fs::absolute(file, ec);
  return (ec ? file : abs).lexically_normal();
}

}  // namespace

ManifestResult one_problem(const fs::path& file, std::string message) {
  ManifestResult r;
  r.problems.push_back(ManifestProblem{file, "", std::move(message)});
  return r;
}

ManifestResult parse_and_validate(const fs::path& file, const std::string& text) {
  const bool blank = std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
  });
  if (blank) {
    return one_problem(file, "malformed JSON: the file is empty; expected a JSON object");
  }
  JsonReadResult parsed = read_json(text);
  if (parsed.error) {
    const JsonSyntaxError& err = *parsed.error;
    return one_problem(file, "malformed JSON at line " + std::to_string(err.line) + ", column " +
                                 std::to_string(err.column) + " (byte " + std::to_string(err.byte) +
                                 "): " + err.reason);
  }
  const Json& doc = parsed.root;
  const auto& duplicates = parsed.duplicates;

  // The format version decides everything else: another major is skipped untouched, a newer
  // minor relaxes unknown keys. A missing or malformed one is validated strictly (so a typo in
  // its own name gets a suggestion).
  bool strict = true;
  std::optional<FormatVersion> version;
  std::vector<ManifestProblem> version_problems;
  if (doc.is_object() && doc.contains("format_version")) {
    const Json& fv = doc["format_version"];
    if (fv.is_string()) version = parse_format_version(fv.get_ref<const std::string&>());
    if (!version) {
      version_problems.push_back(ManifestProblem{
          file, "/format_version",
          "expected a version string \"MAJOR.MINOR\" such as \"1.0\", found " + describe(fv)});
    } else if (version->major_overflow ||
               version->major != static_cast<unsigned long long>(kManifestFormatMajor)) {
      ManifestResult r;
      r.skipped_format = true;
      r.problems.push_back(ManifestProblem{
          file, "/format_version",
          "format version " + quote(fv.get_ref<const std::string&>()) + " has major " +
              std::string(version->major_text) + "; expected major " +
              std::to_string(kManifestFormatMajor) + " (this runtime reads format " +
              std::to_string(kManifestFormatMajor) + ".x): manifest skipped"});
      return r;
    } else {
      strict = version->minor <= kManifestFormatMinor;
    }
  }

  const fs::path abs = absolute_normal(file);
  Validator validator(file, abs.parent_path(), strict);
  auto& problems = validator.problems();
  for (const auto& [pointer, key] : duplicates) {
    problems.push_back(ManifestProblem{
        file, pointer, "duplicate key " + quote_short(key) + ": a key may appear once per object"});
  }
  problems.insert(problems.end(), version_problems.begin(), version_problems.end());

  Manifest m;
  validator.root(doc, m);

  ManifestResult r;
  // No problem implies a valid format_version (it is required), checked here all the same.
  if (!problems.empty() || !version) {
    r.problems = std::move(problems);
    if (r.problems.empty()) {
      r.problems.push_back(ManifestProblem{file, "", "format_version could not be read"});
    }
    return r;
  }
  m.path = abs;
  m.text = text;
  m.format_major = static_cast<int>(version->major);
  m.format_minor = version->minor;
  r.manifest = std::move(m);
  return r;
}

}  // namespace metrale::manifest_detail
