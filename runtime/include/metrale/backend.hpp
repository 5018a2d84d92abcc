// SPDX-License-Identifier: MIT OR Apache-2.0
// Backend: the C++ face of one plugin instance bound to one device. Memory, streams, kernel
// lookup with audit rows, and a typed launch that packs arguments in cuLaunchKernel's convention
// and checks them against the manifest's declared parameters.
//
// Ownership: a Backend keeps its plugin library loaded (shared) until the last Backend and every
// handle user are gone; a handle is valid as long as the Backend that returned it. Thread-safety:
// lookups, memory, streams and launches may be called from several threads at once; the plugin
// serialises internally where it must. Launching a resolved handle takes no runtime lock and
// allocates nothing unless the launch fails.
#pragma once

#include <metrale/audit.hpp>
#include <metrale/manifest.hpp>
#include <metrale/plugin_abi.h>
#include <metrale/status.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace metrale {

class PluginLibrary;
class PluginGuard;

// Destroys a plugin instance through its table's destroy(), guarded (an exception escaping the
// plugin is logged): never throws.
struct PluginInstanceDeleter {
  const metrale_plugin_table* table = nullptr;
  std::string plugin;  // names the plugin in that log line
  void operator()(metrale_backend* instance) const noexcept;
};
// One owned plugin instance: whoever holds it destroys it, exactly once.
using PluginInstance = std::unique_ptr<metrale_backend, PluginInstanceDeleter>;

// What a Backend keeps about one kernel of its manifest (backend.cpp).
struct KernelRecord;

// A resolved kernel; value 0 is the null handle (what try_kernel returns for "absent").
struct KernelHandle {
  uint64_t value = 0;  // the plugin's handle
  // The returning Backend's record of the kernel, which launch reads without a lock or a lookup;
  // null in a handle no Backend returned, which launch refuses.
  const KernelRecord* record = nullptr;
  explicit operator bool() const noexcept { return value != 0; }
  friend bool operator==(KernelHandle, KernelHandle) = default;
};

// A device address (for the CPU backend, a host address). Distinct from u64 so typed launch can
// tell a pointer parameter from an integer one.
struct DevicePtr {
  uint64_t address = 0;
  explicit operator bool() const noexcept { return address != 0; }
  DevicePtr offset(uint64_t bytes) const noexcept { return {address + bytes}; }
  friend bool operator==(DevicePtr, DevicePtr) = default;
};

struct LaunchShape {
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t shared_mem_bytes = 0;
  uint64_t stream = 0;
};

// How one kernel of the manifest fares on this instance (for `metrale kernels`).
struct KernelAvailability {
  std::string module;
  std::string name;
  bool listed = false;    // in the manifest
  bool provided = false;  // the plugin lists it
  bool gated = false;     // listed and provided, but the device's target does not qualify
  std::string note;       // why gated / signature disagreement / unlisted
};

template <class T>
constexpr metrale_param_type param_type_of() {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, DevicePtr>) return METRALE_PARAM_PTR;
  else if constexpr (std::is_same_v<U, uint32_t>) return METRALE_PARAM_U32;
  else if constexpr (std::is_same_v<U, int32_t>) return METRALE_PARAM_I32;
  else if constexpr (std::is_same_v<U, uint64_t>) return METRALE_PARAM_U64;
  else if constexpr (std::is_same_v<U, int64_t>) return METRALE_PARAM_I64;
  else if constexpr (std::is_same_v<U, float>) return METRALE_PARAM_F32;
  else if constexpr (std::is_same_v<U, double>) return METRALE_PARAM_F64;
  else static_assert(sizeof(U) == 0, "kernel arguments are DevicePtr, u32, i32, u64, i64, f32, f64");
}

// Every call into the plugin goes through one guard (runtime/src/plugin_guard.hpp): a failure is an
// Error with the plugin's own status, naming the plugin, the entry point and its last_error()
// message; an exception escaping the plugin is Error(internal), never a crash.
class Backend {
 public:
  // Made by the Registry; `instance` is owned and destroyed with the Backend, before the library
  // can unload. Throws Error when device_info() or list_kernels() fails (the instance is destroyed).
  Backend(std::shared_ptr<PluginLibrary> library, Manifest manifest, PluginInstance instance,
          std::shared_ptr<AuditLog> audit);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const noexcept { return manifest_.backend; }
  const std::string& target() const noexcept { return target_; }
  const std::string& device_name() const noexcept { return device_name_; }
  uint64_t memory_bytes() const noexcept { return memory_bytes_; }
  uint32_t compute_units() const noexcept { return compute_units_; }
  const Manifest& manifest() const noexcept { return manifest_; }
  const std::string& plugin_version() const noexcept;
  // "xxh3-64:..." of the plugin library file, computed on first use.
  std::string library_checksum() const;
  AuditLog& audit() noexcept { return *audit_; }
  std::shared_ptr<AuditLog> audit_ptr() const noexcept { return audit_; }

  // How a lookup behaves and what its audit row records. Everything the asking site knows goes
  // in here: the row is written once, at the lookup, and never edited.
  struct LookupRequest {
    LookupKind kind = LookupKind::try_lookup;
    std::span<const metrale_param_type> expected;  // caller's parameter list; empty: not checked
    std::string lever;           // "NAME=value" that steered this lookup, for the audit row
    std::string refuse_because;  // non-empty: a miss is a Refusal with this text (row: refused)
    std::vector<AuditAnnotation> annotations;  // stored on the row as given (audit.hpp); keys distinct
  };

  // What one lookup came to: the handle (null on a miss), the outcome and reason its audit row
  // records, and that row's sequence number in audit().
  struct Resolution {
    KernelHandle handle;
    LookupOutcome outcome = LookupOutcome::null_handle;
    std::string reason;  // "provided", "not in manifest: ...", "gated: ...", "signature differs: ..."
    uint64_t sequence = 0;
    explicit operator bool() const noexcept { return static_cast<bool>(handle); }
  };

  // The one lookup: resolves (module, name) through the manifest, the target gate, the
  // signature check and the plugin. Appends one audit row. A miss returns a Resolution with the
  // null handle and the reason for try lookups, throws Error for require lookups and Refusal
  // when refuse_because is set (the message carries the reason).
  Resolution resolve(std::string_view module, std::string_view name, const LookupRequest& request,
                     std::source_location site = std::source_location::current());
  // resolve() for the handle alone: the warm path (a lookup repeated from one site, without a
  // lever or annotations) allocates nothing.
  KernelHandle lookup(std::string_view module, std::string_view name, const LookupRequest& request,
                      std::source_location site = std::source_location::current());

  // Resolve (module, name) or throw Error saying why: not in manifest (listing what the module
  // has), not provided by the plugin (its message), gated by target, or signature mismatch.
  KernelHandle kernel(std::string_view module, std::string_view name,
                      std::source_location site = std::source_location::current());
  KernelHandle kernel(std::string_view module, std::string_view name,
                      std::span<const metrale_param_type> expected,
                      std::source_location site = std::source_location::current());
  // Same, but every failure becomes the null handle (resolve() tells the reason).
  KernelHandle try_kernel(std::string_view module, std::string_view name,
                          std::source_location site = std::source_location::current());

  // The manifest entry of a handle this Backend returned: what the kernel that runs declares
  // (under METRALE_KERNEL_SUBST, the substitute's entry). Throws Error(not_found) for a handle
  // this Backend did not return.
  const ManifestKernel& manifest_entry(KernelHandle handle) const;
  // Manifest's parameter list for a handle this Backend returned.
  std::span<const KernelParam> params(KernelHandle handle) const;
  // "module/name" for a handle this Backend returned ("(unknown handle)" for any other).
  std::string kernel_name(KernelHandle handle) const;

  // Listed vs provided vs gated for every kernel the manifest or the plugin mentions.
  std::vector<KernelAvailability> kernel_availability() const;
  // Why this device's target does not qualify for a kernel of the manifest ("" when it does):
  // its min_target or cpu_features by the manifest's target_tiers.
  std::string gate_reason(const ManifestKernel& kernel) const;

  DevicePtr alloc(size_t bytes);
  void free(DevicePtr ptr);
  void copy_to_device(DevicePtr dst, const void* src, size_t bytes, uint64_t stream = 0);
  void copy_to_host(void* dst, DevicePtr src, size_t bytes, uint64_t stream = 0);
  void copy_device(DevicePtr dst, DevicePtr src, size_t bytes, uint64_t stream = 0);
  void memset(DevicePtr dst, uint8_t value, size_t bytes, uint64_t stream = 0);
  // Bytes copy_to_device / copy_to_host have copied so far on this Backend (a load's uploads, a
  // step's logits), for reports; thread-safe.
  uint64_t bytes_copied_to_device() const noexcept { return bytes_to_device_.load(std::memory_order_relaxed); }
  uint64_t bytes_copied_to_host() const noexcept { return bytes_to_host_.load(std::memory_order_relaxed); }
  uint64_t stream_create();
  void stream_destroy(uint64_t stream);
  void synchronize(uint64_t stream = 0);

  // Typed launch: checks arity and types against the manifest, then packs `args` as
  // cuLaunchKernel does (an array of pointers to the values).
  template <class... Args>
  void launch(KernelHandle kernel, const LaunchShape& shape, const Args&... args) {
    static constexpr std::array<metrale_param_type, sizeof...(Args)> types{param_type_of<Args>()...};
    std::array<const void*, sizeof...(Args)> pointers{static_cast<const void*>(&args)...};
    launch_packed(kernel, shape, types, pointers);
  }
  // The untyped form the template uses; also for callers that build argument lists at run time.
  // A handle this Backend did not return is Error(invalid_argument).
  void launch_packed(KernelHandle kernel, const LaunchShape& shape,
                     std::span<const metrale_param_type> types, std::span<const void* const> args);

  // The raw plugin table and instance, for tests and benchmarks that must bypass the facade.
  const metrale_plugin_table& table() const noexcept;
  metrale_backend* instance() const noexcept { return instance_.get(); }

 private:
  // The record of a handle this Backend returned, else null.
  const KernelRecord* record_of(KernelHandle handle) const noexcept;
  // Resolves or returns the null handle with `failure` and `reason` filled in.
  KernelHandle find_kernel(std::string_view module, std::string_view name,
                           std::span<const metrale_param_type> expected, Status& failure, std::string& reason);
  // What a lookup of one (module, name) resolved to; shared by every later lookup of it.
  struct Cached {
    KernelHandle handle;
    Status failure = Status::ok;
    const ManifestKernel* listed = nullptr;      // the manifest entry, when there is one
    std::shared_ptr<const AuditRow> prototype;   // the audit row minus site, kind, outcome, lever, annotations
  };
  // One lookup's answer before its row is written: the handle, why it failed, its row's prototype.
  struct Found {
    KernelHandle handle;
    Status failure = Status::ok;
    std::shared_ptr<const AuditRow> prototype;
    std::string substitution;  // under METRALE_KERNEL_SUBST: the Refusal a miss is; else ""
  };
  using KernelKey = std::pair<std::string, std::string>;
  using KernelKeyView = std::pair<std::string_view, std::string_view>;
  struct KernelKeyLess {
    using is_transparent = void;
    static KernelKeyView view(const KernelKey& k) { return {k.first, k.second}; }
    static KernelKeyView view(const KernelKeyView& k) { return k; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const { return view(a) < view(b); }
  };
  // find_kernel() once per (module, name); later lookups reuse the answer (resolutions do not
  // change within a process: the manifest, the target and the plugin's kernel set are fixed).
  const Cached& cached_resolution(std::string_view module, std::string_view name);
  std::shared_ptr<const AuditRow> make_prototype(std::string_view module, std::string_view name, KernelHandle handle,
                                                 std::string reason, std::string substitute = {}) const;
  // The answer under METRALE_KERNEL_SUBST's `substitute` ("module/name") for module/name.
  Found find_substitute(std::string_view module, std::string_view name, const std::string& substitute,
                        const LookupRequest& request);
  // resolve() and lookup(): writes the row, throws on a require or refused miss, fills `out`
  // (when given) with what a Resolution tells.
  KernelHandle lookup_into(std::string_view module, std::string_view name, const LookupRequest& request,
                           const std::source_location& site, Resolution* out);
  // METRALE_KERNEL_SUBST's replacement for module/name, if any.
  std::optional<std::string> substitute_for(std::string_view module, std::string_view name) const;
  // The guard every plugin call goes through (plugin_guard.hpp).
  PluginGuard guard() const noexcept;

  // Declaration order is destruction order reversed: the instance goes before the library.
  std::shared_ptr<PluginLibrary> library_;
  Manifest manifest_;
  std::string plugin_label_;  // "backend cpu (plugin /.../libmetrale_cpu.so)": opens every message
  PluginInstance instance_;
  std::shared_ptr<AuditLog> audit_;
  std::string target_;
  std::string device_name_;
  uint64_t memory_bytes_ = 0;
  uint32_t compute_units_ = 0;
  std::vector<std::string> provided_;  // "module/name" the plugin lists
  std::map<std::string, std::vector<metrale_param_type>, std::less<>> provided_params_;
  // One per kernel of manifest_, in its order; made with the Backend and never changed after, so
  // the handles' pointers into it stay valid and launches read it without the mutex.
  std::vector<KernelRecord> records_;
  mutable std::mutex mutex_;
  std::atomic<uint64_t> bytes_to_device_{0}, bytes_to_host_{0};
  mutable std::string library_checksum_;
  std::map<KernelKey, Cached, KernelKeyLess> resolutions_;
};

}  // namespace metrale
