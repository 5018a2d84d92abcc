// SPDX-License-Identifier: MIT OR Apache-2.0
#include <metrale/backend.hpp>
#include <metrale/levers.hpp>
#include <metrale/log.hpp>
#include <metrale/target.hpp>

#include "plugin_guard.hpp"
#include "plugin_library.hpp"

#include <algorithm>
#include <set>

namespace metrale {

// Immutable from the Backend's construction on: what a launch checks and names.
struct KernelRecord {
  const ManifestModule* module;
  const ManifestKernel* kernel;
};

namespace {

std::string join_types(std::span<const metrale_param_type> types) {
  std::string out = "(";
  for (size_t i = 0; i < types.size(); ++i) out += (i ? ", " : "") + std::string(param_type_name(types[i]));
  return out + ")";
}

std::string join_params(const std::vector<KernelParam>& params) {
  std::vector<metrale_param_type> types;
  for (const auto& p : params) types.push_back(p.type);
  return join_types(types);
}

bool same_types(std::span<const metrale_param_type> types, const std::vector<KernelParam>& params) {
  if (types.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i)
    if (types[i] != params[i].type) return false;
  return true;
}

// The requests of kernel() and try_kernel(), built once: their warm path constructs none.
const Backend::LookupRequest kTryRequest{};
const Backend::LookupRequest kRequireRequest{
    .kind = LookupKind::require, .expected = {}, .lever = {}, .refuse_because = {}, .annotations = {}};

std::string key_of(std::string_view module, std::string_view name) {
  return std::string(module) + "/" + std::string(name);
}

}  // namespace

Backend::Backend(std::shared_ptr<PluginLibrary> library, Manifest manifest, PluginInstance instance,
                 std::shared_ptr<AuditLog> audit)
    : library_(std::move(library)),
      manifest_(std::move(manifest)),
      plugin_label_("backend " + manifest_.backend + " (plugin " + manifest_.library.string() + ")"),
      instance_(std::move(instance)),
      audit_(std::move(audit)) {
  if (!instance_) throw Error(Status::internal, plugin_label_ + ": no instance to drive");
  metrale_device_info info{};
  info.struct_size = sizeof(info);
  guard().require("device_info()", [&] { return table().device_info(instance_.get(), &info); });
  if (info.target == nullptr)
    throw Error(Status::internal, plugin_label_ + ": device_info() answered OK without a target");
  target_ = info.target;
  device_name_ = info.name ? info.name : "";
  memory_bytes_ = info.memory_bytes;
  compute_units_ = info.compute_units;

  const metrale_kernel_desc* kernels = nullptr;
  size_t count = 0;
  guard().require("list_kernels()", [&] { return table().list_kernels(instance_.get(), &kernels, &count); });
  if (count > 0 && kernels == nullptr)
    throw Error(Status::internal, plugin_label_ + ": list_kernels() answered " + std::to_string(count) +
                                      " kernels and a NULL array");
  for (const ManifestModule& module : manifest_.modules)
    for (const ManifestKernel& kernel : module.kernels) records_.push_back({&module, &kernel});
  for (size_t i = 0; i < count; ++i) {
    if (kernels[i].module == nullptr || kernels[i].name == nullptr) continue;
    std::string key = key_of(kernels[i].module, kernels[i].name);
    provided_.push_back(key);
    if (kernels[i].param_types != nullptr)
      provided_params_[key].assign(kernels[i].param_types, kernels[i].param_types + kernels[i].param_count);
  }
}

Backend::~Backend() = default;  // instance_ first (destroy(), guarded), then the library reference

PluginGuard Backend::guard() const noexcept { return PluginGuard(plugin_label_, &library_->table(), instance_.get()); }

const std::string& Backend::plugin_version() const noexcept { return library_->version(); }

std::string Backend::library_checksum() const {
  std::lock_guard lock(mutex_);
  if (library_checksum_.empty()) library_checksum_ = file_checksum(manifest_.library);
  return library_checksum_;
}

const metrale_plugin_table& Backend::table() const noexcept { return library_->table(); }

std::string Backend::gate_reason(const ManifestKernel& kernel) const {
  if (kernel.min_target && !target_satisfies(target_, *kernel.min_target, manifest_.target_tiers))
    return "requires target " + *kernel.min_target + "; this device is " + target_;
  if (!kernel.cpu_features.empty()) {
    auto have = target_features(target_, manifest_.target_tiers);
    std::string missing;
    for (const auto& feature : kernel.cpu_features)
      if (std::find(have.begin(), have.end(), feature) == have.end()) missing += (missing.empty() ? "" : ", ") + feature;
    if (!missing.empty())
      return "requires cpu_features " + missing + " that target " + target_ + " lacks (manifest /target_tiers)";
  }
  return {};
}

KernelHandle Backend::find_kernel(std::string_view module, std::string_view name,
                                  std::span<const metrale_param_type> expected, Status& failure, std::string& reason) {
  const ManifestModule* listed_module = nullptr;
  for (const auto& m : manifest_.modules)
    if (m.name == module) listed_module = &m;
  if (listed_module == nullptr) {
    std::string modules;
    for (const auto& m : manifest_.modules) modules += (modules.empty() ? "" : ", ") + m.name;
    failure = Status::not_found;
    reason = "not in manifest: the " + manifest_.backend + " manifest has no module '" + std::string(module) +
             "' (modules: " + (modules.empty() ? "none" : modules) + ")";
    return {};
  }
  const ManifestKernel* listed = manifest_.find_kernel(module, name);
  if (listed == nullptr) {
    std::string names;
    for (const auto& k : listed_module->kernels) names += (names.empty() ? "" : ", ") + k.name;
    failure = Status::not_found;
    reason = "not in manifest: module '" + std::string(module) + "' lists " + (names.empty() ? "no kernels" : names);
    return {};
  }
  if (std::string gate = gate_reason(*listed); !gate.empty()) {
    failure = Status::incompatible;
    reason = "gated: " + gate;
    return {};
  }
  if (!expected.empty()) {
    bool same = expected.size() == listed->params.size();
    for (size_t i = 0; same && i < expected.size(); ++i) same = expected[i] == listed->params[i].type;
    if (!same) {
      failure = Status::incompatible;
      reason = "signature differs: caller expects " + join_types(expected) + ", manifest declares " +
               join_params(listed->params);
      return {};
    }
  }
  std::string module_text(module), name_text(name);
  uint64_t handle = 0;
  metrale_status status = METRALE_STATUS_INTERNAL;
  const PluginGuard plugin = guard();
  try {
    status = plugin.invoke(EntryName("get_kernel", module, name),
                           [&] { return table().get_kernel(instance(), module_text.c_str(), name_text.c_str(), &handle); });
  } catch (const Error& e) {
    failure = e.status();
    reason = std::string("in manifest, but ") + e.what();
    return {};
  }
  if (status != METRALE_STATUS_OK || handle == 0) {
    failure = status == METRALE_STATUS_OK ? Status::internal : status_from_abi(status);
    std::string message = status == METRALE_STATUS_OK ? "it returned OK with the null handle" : plugin.last_error();
    reason = "in manifest, but the plugin did not provide it (" + std::string(status_name(failure)) + "): " + message;
    return {};
  }
  const auto record = std::find_if(records_.begin(), records_.end(), [&](const KernelRecord& r) { return r.kernel == listed; });
  reason = "provided";
  return KernelHandle{handle, &*record};  // every kernel of manifest_ has its record
}

std::shared_ptr<const AuditRow> Backend::make_prototype(std::string_view module, std::string_view name,
                                                       KernelHandle handle, std::string reason,
                                                       std::string substitute) const {
  auto row = std::make_shared<AuditRow>();
  row->backend = manifest_.backend;
  row->target = target_;
  row->module = std::string(module);
  row->kernel = std::string(name);
  row->substitute = std::move(substitute);
  row->reason = std::move(reason);
  row->handle = handle.value;
  return row;
}

const Backend::Cached& Backend::cached_resolution(std::string_view module, std::string_view name) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = resolutions_.find(KernelKeyView{module, name}); it != resolutions_.end()) return it->second;
  }
  Cached cached;
  std::string reason;
  cached.handle = find_kernel(module, name, {}, cached.failure, reason);
  cached.listed = manifest_.find_kernel(module, name);
  cached.prototype = make_prototype(module, name, cached.handle, std::move(reason));
  std::lock_guard lock(mutex_);
  // Another thread may have resolved it meanwhile; either answer is the same. Map nodes are stable.
  return resolutions_.try_emplace(KernelKey{std::string(module), std::string(name)}, std::move(cached)).first->second;
}

Backend::Found Backend::find_substitute(std::string_view module, std::string_view name, const std::string& substitute,
                                        const LookupRequest& request) {
  // A kernel developer's substitute: it must resolve and declare the caller's parameters, or
  // the runtime refuses — never a silent fall back to the original.
  auto slash = substitute.find('/');
  std::string sub_module = substitute.substr(0, slash), sub_name = substitute.substr(slash + 1);
  Found found;
  std::vector<metrale_param_type> expected(request.expected.begin(), request.expected.end());
  if (expected.empty()) {
    if (const ManifestKernel* original = manifest_.find_kernel(module, name))
      for (const auto& p : original->params) expected.push_back(p.type);
  }
  std::string reason;
  if (const ManifestKernel* replacement = manifest_.find_kernel(sub_module, sub_name);
      replacement && !expected.empty()) {
    std::vector<metrale_param_type> declared;
    for (const auto& p : replacement->params) declared.push_back(p.type);
    if (declared != expected) {
      found.failure = Status::incompatible;
      reason = "substitute " + substitute + " declares " + join_params(replacement->params) + " but " +
               key_of(module, name) + " takes " + join_types(expected);
    }
  }
  if (found.failure == Status::ok) found.handle = find_kernel(sub_module, sub_name, expected, found.failure, reason);
  if (found.handle) reason = "substituted by " + substitute + ": " + reason;
  found.substitution = "METRALE_KERNEL_SUBST maps " + key_of(module, name) + " to " + substitute + ", which cannot be used";
  found.prototype = make_prototype(module, name, found.handle, std::move(reason), substitute);
  return found;
}

KernelHandle Backend::lookup_into(std::string_view module, std::string_view name, const LookupRequest& request,
                                  const std::source_location& site, Resolution* out) {
  Found found;
  std::string lever = request.lever;
  const std::string* refusal = &request.refuse_because;
  if (auto substitute = substitute_for(module, name)) {
    found = find_substitute(module, name, *substitute, request);
    const std::string note = lever_note("METRALE_KERNEL_SUBST");
    lever = lever.empty() ? note : lever + ", " + note;
    refusal = &found.substitution;
  } else {
    // The warm path: the cached answer, the caller's signature checked against the manifest.
    const Cached& cached = cached_resolution(module, name);
    found.handle = cached.handle;
    found.failure = cached.failure;
    found.prototype = cached.prototype;
    if (found.handle && !request.expected.empty() && cached.listed && !same_types(request.expected, cached.listed->params)) {
      found.handle = {};
      found.failure = Status::incompatible;
      found.prototype = make_prototype(module, name, found.handle,
                                       "signature differs: caller expects " + join_types(request.expected) +
                                           ", manifest declares " + join_params(cached.listed->params));
    }
  }
  LookupOutcome outcome = LookupOutcome::resolved;
  if (!found.handle) {
    if (!refusal->empty()) outcome = LookupOutcome::refused;
    else outcome = request.kind == LookupKind::require ? LookupOutcome::error : LookupOutcome::null_handle;
  }
  const uint64_t sequence = audit_->append(site, found.prototype, request.kind, outcome, std::move(lever), request.annotations);
  if (out) *out = Resolution{found.handle, outcome, found.prototype->reason, sequence};
  if (found.handle) return found.handle;
  auto what = [&] {
    return key_of(module, name) + " on backend " + manifest_.backend + " (" + target_ + "): " + found.prototype->reason;
  };
  if (!refusal->empty()) throw Refusal(*refusal + ": " + what());
  if (request.kind == LookupKind::require) throw Error(found.failure, what());
  if (logger()->should_log(spdlog::level::debug)) logger()->debug("try_kernel {} -> null", what());
  return {};
}

Backend::Resolution Backend::resolve(std::string_view module, std::string_view name, const LookupRequest& request,
                                     std::source_location site) {
  Resolution resolution;
  lookup_into(module, name, request, site, &resolution);
  return resolution;
}

KernelHandle Backend::lookup(std::string_view module, std::string_view name, const LookupRequest& request,
                             std::source_location site) {
  return lookup_into(module, name, request, site, nullptr);
}

std::optional<std::string> Backend::substitute_for(std::string_view module, std::string_view name) const {
  const auto& substitutions = kernel_substitutions();
  if (substitutions.empty()) return std::nullopt;  // the usual case: no string work at all
  std::string key = key_of(module, name);
  for (const auto& [from, to] : substitutions)
    if (from == key) return to;
  return std::nullopt;
}

KernelHandle Backend::kernel(std::string_view module, std::string_view name, std::source_location site) {
  return lookup(module, name, kRequireRequest, site);
}

KernelHandle Backend::kernel(std::string_view module, std::string_view name,
                             std::span<const metrale_param_type> expected, std::source_location site) {
  LookupRequest request;
  request.kind = LookupKind::require;
  request.expected = expected;
  return lookup(module, name, request, site);
}

KernelHandle Backend::try_kernel(std::string_view module, std::string_view name, std::source_location site) {
  return lookup(module, name, kTryRequest, site);
}

const KernelRecord* Backend::record_of(KernelHandle handle) const noexcept {
  // Addresses compared, never read: another Backend's handle may point into freed memory.
  const auto address = reinterpret_cast<uintptr_t>(handle.record);
  const auto first = reinterpret_cast<uintptr_t>(records_.data());
  if (handle.value == 0 || address < first || address - first >= records_.size() * sizeof(KernelRecord) ||
      (address - first) % sizeof(KernelRecord) != 0)
    return nullptr;
  return handle.record;
}

const ManifestKernel& Backend::manifest_entry(KernelHandle handle) const {
  const KernelRecord* record = record_of(handle);
  if (record == nullptr) throw Error(Status::not_found, "backend " + name() + ": unknown kernel handle");
  return *record->kernel;
}

std::span<const KernelParam> Backend::params(KernelHandle handle) const { return manifest_entry(handle).params; }

std::string Backend::kernel_name(KernelHandle handle) const {
  const KernelRecord* record = record_of(handle);
  return record ? key_of(record->module->name, record->kernel->name) : "(unknown handle)";
}

std::vector<KernelAvailability> Backend::kernel_availability() const {
  std::vector<KernelAvailability> out;
  std::set<std::string> seen;
  for (const auto& module : manifest_.modules) {
    for (const auto& kernel : module.kernels) {
      KernelAvailability row{module.name, kernel.name, true, false, false, {}};
      std::string key = key_of(module.name, kernel.name);
      seen.insert(key);
      row.provided = std::find(provided_.begin(), provided_.end(), key) != provided_.end();
      if (!row.provided) {
        row.note = "listed in the manifest but the plugin does not provide it";
      } else if (std::string gate = gate_reason(kernel); !gate.empty()) {
        row.gated = true;
        row.note = gate;
      } else if (auto it = provided_params_.find(key); it != provided_params_.end()) {
        std::vector<metrale_param_type> declared;
        for (const auto& p : kernel.params) declared.push_back(p.type);
        if (declared != it->second)
          row.note = "plugin declares parameters " + join_types(it->second) + ", manifest " + join_params(kernel.params);
      }
      out.push_back(std::move(row));
    }
  }
  for (const auto& key : provided_) {
    if (seen.count(key)) continue;
    auto slash = key.find('/');
    out.push_back({key.substr(0, slash), key.substr(slash + 1), false, true, false,
                   "provided by the plugin but not listed in the manifest (unreachable)"});
  }
  return out;
}

DevicePtr Backend::alloc(size_t bytes) {
  uint64_t address = 0;
  const std::string entry = "mem_alloc(" + std::to_string(bytes) + ")";
  guard().require(entry, [&] { return table().mem_alloc(instance(), bytes, &address); });
  if (address == 0) throw Error(Status::internal, plugin_label_ + ": " + entry + " answered OK with address 0");
  return {address};
}

void Backend::free(DevicePtr ptr) {
  if (!ptr) return;
  guard().require("mem_free()", [&] { return table().mem_free(instance(), ptr.address); });
}

void Backend::copy_to_device(DevicePtr dst, const void* src, size_t bytes, uint64_t stream) {
  guard().require("copy_to_device(" + std::to_string(bytes) + " bytes)",
                  [&] { return table().copy_to_device(instance(), dst.address, src, bytes, stream); });
  bytes_to_device_.fetch_add(bytes, std::memory_order_relaxed);
}

void Backend::copy_to_host(void* dst, DevicePtr src, size_t bytes, uint64_t stream) {
  guard().require("copy_to_host(" + std::to_string(bytes) + " bytes)",
                  [&] { return table().copy_to_host(instance(), dst, src.address, bytes, stream); });
  bytes_to_host_.fetch_add(bytes, std::memory_order_relaxed);
}

void Backend::copy_device(DevicePtr dst, DevicePtr src, size_t bytes, uint64_t stream) {
  guard().require("copy_device(" + std::to_string(bytes) + " bytes)",
                  [&] { return table().copy_device(instance(), dst.address, src.address, bytes, stream); });
}

void Backend::memset(DevicePtr dst, uint8_t value, size_t bytes, uint64_t stream) {
  guard().require("memset_device(" + std::to_string(bytes) + " bytes)",
                  [&] { return table().memset_device(instance(), dst.address, value, bytes, stream); });
}

uint64_t Backend::stream_create() {
  uint64_t stream = 0;
  guard().require("stream_create()", [&] { return table().stream_create(instance(), &stream); });
  if (stream == 0) throw Error(Status::internal, plugin_label_ + ": stream_create() answered OK with stream 0, the default stream");
  return stream;
}

void Backend::stream_destroy(uint64_t stream) {
  guard().require("stream_destroy()", [&] { return table().stream_destroy(instance(), stream); });
}

void Backend::synchronize(uint64_t stream) {
  guard().require("stream_synchronize()", [&] { return table().stream_synchronize(instance(), stream); });
}

void Backend::launch_packed(KernelHandle kernel, const LaunchShape& shape, std::span<const metrale_param_type> types,
                            std::span<const void* const> args) {
  const KernelRecord* record = record_of(kernel);
  if (record == nullptr)
    throw Error(Status::invalid_argument, "backend " + name() + ": launch of a handle this backend did not return");
  const std::vector<KernelParam>& params = record->kernel->params;
  const auto label = [&] { return key_of(record->module->name, record->kernel->name); };
  if (types.size() != params.size())
    throw Error(Status::invalid_argument, label() + ": launched with " + std::to_string(types.size()) +
                                              " arguments, manifest declares " + std::to_string(params.size()) + " " +
                                              join_params(params));
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] != params[i].type)
      throw Error(Status::invalid_argument, label() + ": argument " + std::to_string(i) + " (" + params[i].name +
                                                ") is " + param_type_name(types[i]) + ", manifest declares " +
                                                param_type_name(params[i].type));
  metrale_launch_config config{};
  std::copy(shape.grid.begin(), shape.grid.end(), config.grid);
  std::copy(shape.block.begin(), shape.block.end(), config.block);
  config.shared_mem_bytes = shape.shared_mem_bytes;
  config.stream = shape.stream;
  // The ABI takes void* const* (cuLaunchKernel's convention); plugins only read through it.
  auto raw = const_cast<void* const*>(reinterpret_cast<const void* const*>(args.data()));
  guard().require(EntryName("launch", record->module->name, record->kernel->name),
                  [&] { return table().launch(instance(), kernel.value, &config, raw, args.size()); });
}

}  // namespace metrale
