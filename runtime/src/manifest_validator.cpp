// SPDX-License-Identifier: MIT OR Apache-2.0
// Manifest validation. The rules are documented in docs/manifest.md and mirrored by
// manifests/manifest.schema.json (tests/manifest checks that both agree).
#include "manifest_validator.hpp"

#include "json_reader.hpp"
#include "json_text.hpp"
#include "manifest_rules.hpp"

#include <metrale/names.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace metrale::manifest_detail {

using namespace metrale::json_text;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Validation

struct KeySpec {
  std::string_view name;
  bool required;
  std::string_view expected;  // for "missing required key" messages
};

constexpr std::array kRootKeys{
    KeySpec{"format_version", true, "a version string \"MAJOR.MINOR\" such as \"1.0\""},
    KeySpec{"backend", true, "a backend name string such as \"my_backend\""},
    KeySpec{"library", true, "a library path string"},
    KeySpec{"abi_version", true, "an integer from 1 to 4294967295"},
    KeySpec{"priority", true, "an integer from -1000 to 1000"},
    KeySpec{"description", false, "a string"},
    KeySpec{"library_checksum", false, "a string \"xxh3-64:<16 hex digits>\""},
    KeySpec{"targets", false, "an array of strings"},
    KeySpec{"target_tiers", false, "an array of target tier objects, lowest first"},
    KeySpec{"levers", false, "an array of lever objects"},
    KeySpec{"modules", true, "an array of module objects (may be empty)"},
};
constexpr std::array kTierKeys{
    KeySpec{"target", true, "a non-empty target string"},
    KeySpec{"features", false, "an array of non-empty strings"},
};
constexpr std::array kLeverKeys{
    KeySpec{"name", true, "a lever name METRALE_[A-Z0-9_]+"},
    KeySpec{"option", true, "a create() option key (an identifier) or \"device_index\""},
    KeySpec{"type", true, "one of presence, flag, u32, string, choice, path"},
    KeySpec{"default", true, "a non-empty string (shown by `metrale levers`)"},
    KeySpec{"meaning", true, "a non-empty string"},
    KeySpec{"choices", false, "an array of distinct non-empty strings"},
    KeySpec{"path", false, "true or false"},
};
// The lever types a manifest may declare: one value each, as a create() option carries.
constexpr std::array kManifestLeverTypes{LeverType::presence, LeverType::flag, LeverType::u32,
                                         LeverType::string,   LeverType::choice, LeverType::path};
constexpr std::string_view kLeverTypeRule = "one of presence, flag, u32, string, choice, path";
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
                  } else if (key == "target_tiers") {
                    target_tiers(v, p, m);
                  } else if (key == "levers") {
                    levers(v, p, m);
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

  void target_tiers(const Json& v, const std::string& p, Manifest& m) {
    if (!v.is_array()) {
      expected(p, "an array of target tier objects, lowest first", v);
      return;
    }
    std::unordered_map<std::string, std::size_t> first;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string tp = child(p, i);
      TargetTier tier;
      walk_object(v[i], tp, "an object (a target tier: target and features)", kTierKeys,
                  [&](std::string_view key, const Json& tv, const std::string& fp) {
                    if (key == "target") {
                      if (auto target = string_value(tv, fp, "a non-empty target string", true)) {
                        if (auto [it, fresh] = first.emplace(*target, i); !fresh) {
                          problem(fp, "duplicate target " + quote(*target) + " (first listed at " +
                                          child(p, it->second) + ")");
                        }
                        tier.target = std::move(*target);
                      }
                    } else if (key == "features") {
                      tier.features = string_array(tv, fp);
                    }
                  });
      m.target_tiers.push_back(std::move(tier));
    }
  }

  void levers(const Json& v, const std::string& p, Manifest& m) {
    if (!v.is_array()) {
      expected(p, "an array of lever objects", v);
      return;
    }
    std::unordered_map<std::string, std::size_t> names;
    std::unordered_map<std::string, std::size_t> options;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string lp = child(p, i);
      ManifestLever lever;
      if (!this->lever(v[i], lp, lever)) continue;
      unique(names, lever.name, i, child(lp, "name"), "lever name", p);
      unique(options, lever.option, i, child(lp, "option"), "option", p);
      m.levers.push_back(std::move(lever));
    }
  }

  // Reports `value` when an earlier item of the array at `array` (its index in `seen`) had it too.
  void unique(std::unordered_map<std::string, std::size_t>& seen, const std::string& value, std::size_t index,
              const std::string& pointer, std::string_view what, const std::string& array) {
    if (value.empty()) return;
    if (auto [it, fresh] = seen.emplace(value, index); !fresh) {
      problem(pointer, "duplicate " + std::string(what) + " " + quote(value) + " (first declared at " +
                           child(array, it->second) + ")");
    }
  }

  // One lever object; false when it is not an object at all.
  bool lever(const Json& v, const std::string& lp, ManifestLever& lever) {
    bool typed = false;
    std::optional<bool> path;
    const Json* choices = nullptr;
    const bool object = walk_object(
        v, lp, "an object (a lever)", kLeverKeys, [&](std::string_view key, const Json& lv, const std::string& fp) {
          if (key == "name") {
            if (!lv.is_string() || !is_lever_name(lv.get_ref<const std::string&>())) {
              expected(fp, "a lever name: METRALE_ followed by at least one of A-Z 0-9 _", lv);
            } else {
              lever.name = lv.get<std::string>();
            }
          } else if (key == "option") {
            if (!lv.is_string() || !is_identifier(lv.get_ref<const std::string&>())) {
              expected(fp, "a create() option key, an identifier ([A-Za-z_][A-Za-z0-9_]*), or \"device_index\"", lv);
            } else {
              lever.option = lv.get<std::string>();
            }
          } else if (key == "type") {
            typed = lever_type(lv, fp, lever);
          } else if (key == "default") {
            if (auto s = string_value(lv, fp, "a non-empty string", true)) lever.default_text = *s;
          } else if (key == "meaning") {
            if (auto s = string_value(lv, fp, "a non-empty string", true)) lever.meaning = *s;
          } else if (key == "choices") {
            choices = &lv;
          } else if (key == "path") {
            if (!lv.is_boolean()) expected(fp, "true or false", lv);
            else path = lv.get<bool>();
          }
        });
    if (!object) return false;
    lever_rules(v, lp, lever, typed, choices);
    lever.path_like = path.value_or(lever.type == LeverType::path);
    return true;
  }

  bool lever_type(const Json& v, const std::string& fp, ManifestLever& lever) {
    std::optional<LeverType> type;
    if (v.is_string()) type = lever_type_from_name(v.get_ref<const std::string&>());
    if (!type || std::find(kManifestLeverTypes.begin(), kManifestLeverTypes.end(), *type) == kManifestLeverTypes.end()) {
      expected(fp, kLeverTypeRule, v);
      return false;
    }
    lever.type = *type;
    return true;
  }

  // The rules between a lever's keys: choices exactly on choice levers; the device index a u32.
  void lever_rules(const Json& v, const std::string& lp, ManifestLever& lever, bool typed, const Json* choices) {
    if (typed && lever.type == LeverType::choice && choices == nullptr) {
      problem(lp, "missing required key \"choices\" (a lever of type choice lists its choices: expected an "
                  "array of distinct non-empty strings)");
    }
    if (choices != nullptr && typed && lever.type != LeverType::choice) {
      problem(child(lp, "choices"), std::string("choices are allowed only on a lever of type choice; this one is ") +
                                        lever_type_name(lever.type));
    } else if (choices != nullptr) {
      lever_choices(*choices, child(lp, "choices"), lever);
    }
    if (lever.option == kDeviceIndexOption && typed && lever.type != LeverType::u32) {
      problem(child(lp, "type"), std::string("a lever with option \"device_index\" selects the device: expected "
                                             "type u32, found ") + quote(v.at("type").get<std::string>()));
    }
  }

  void lever_choices(const Json& v, const std::string& cp, ManifestLever& lever) {
    if (!v.is_array() || v.empty()) {
      expected(cp, "a non-empty array of distinct non-empty strings", v);
      return;
    }
    lever.choices = string_array(v, cp);
    for (std::size_t i = 0; i < v.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (v[i].is_string() && v[i] == v[j]) {
          problem(child(cp, i), "duplicate choice " + quote(v[i].get<std::string>()) + " (first listed at " +
                                    child(cp, j) + ")");
          break;
        }
      }
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
