// SPDX-License-Identifier: MIT OR Apache-2.0
// The runtime from Python: metrale.Error and metrale.Refusal, the Runtime (a Registry opened as
// layers::open_runtime opens it) with its entries and backends, audit rows as dicts (and back, for
// locks and the CLI's renderings), locks, and the levers.
#include "bindings.hpp"

#include <embed.hpp>
#include <metrale/audit.hpp>
#include <metrale/levers.hpp>
#include <metrale/lock.hpp>
#include <metrale/status.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include <Python.h>

#include <algorithm>

namespace metrale::python {

namespace {

nb::object error_type;
nb::object refusal_type;

// metrale.Error carries the runtime's Status as `status` ("not-found", "incompatible", ...).
void raise_error(const nb::object& type, const Error& e) {
  nb::object instance = type(e.what());
  instance.attr("status") = std::string(status_name(e.status()));
  PyErr_SetObject(type.ptr(), instance.ptr());
}



// AuditRows back from the dicts audit() gave (render_audit_json's fields), for locks and to_json.
LookupKind kind_from(const std::string& name) {
  if (name == lookup_kind_name(LookupKind::try_lookup)) return LookupKind::try_lookup;
  if (name == lookup_kind_name(LookupKind::require)) return LookupKind::require;
  throw Error(Status::invalid_argument, "audit row: kind '" + name + "' is neither 'try' nor 'require'");
}

LookupOutcome outcome_from(const std::string& name) {
  for (LookupOutcome o : {LookupOutcome::resolved, LookupOutcome::null_handle, LookupOutcome::refused, LookupOutcome::error})
    if (name == lookup_outcome_name(o)) return o;
  throw Error(Status::invalid_argument, "audit row: outcome '" + name + "' is not resolved, null, refused or error");
}

std::vector<AuditRow> rows_from_json(const nlohmann::json& rows) {
  validate_resolutions(rows, "audit rows");  // every field a comparison reads, typed, before anything reads it
  std::vector<AuditRow> out;
  for (const auto& j : rows) {
    AuditRow row;
    row.sequence = j.value("sequence", uint64_t{0});
    row.site.file = j.at("site").at("file").get<std::string>();
    row.site.line = j.at("site").at("line").get<uint32_t>();
    row.site.function = j.at("site").at("function").get<std::string>();
    row.backend = j.at("backend").get<std::string>();
    row.target = j.at("target").get<std::string>();
    row.module = j.at("module").get<std::string>();
    row.kernel = j.at("kernel").get<std::string>();
    if (j.contains("substitute") && j["substitute"].is_string()) row.substitute = j["substitute"].get<std::string>();
    row.kind = kind_from(j.value("kind", std::string("try")));
    row.outcome = outcome_from(j.at("outcome").get<std::string>());
    row.reason = j.value("reason", std::string());
    if (j.contains("lever") && j["lever"].is_string()) row.lever = j["lever"].get<std::string>();
    if (const auto annotations = j.find("annotations"); annotations != j.end()) {
      const auto pinned = j.find("pinned");
      for (const auto& [key, value] : annotations->items()) {
        const bool is_pinned = pinned != j.end() && std::find(pinned->begin(), pinned->end(), key) != pinned->end();
        row.annotations.push_back({key, value.get<std::string>(), is_pinned});
      }
    }
    row.handle = j.value("handle", uint64_t{0});
    out.push_back(std::move(row));
  }
  return out;
}


nb::dict entry_dict(const RegistryEntry& e) {
  nb::dict d;
  d["backend"] = e.backend;
  d["manifest"] = e.manifest_path.string();
  d["origin"] = manifest_origin_name(e.origin);
  d["priority"] = e.priority;
  d["state"] = entry_state_name(e.state);
  d["reason"] = e.reason;
  d["cross_check"] = e.cross_check;
  return d;
}


void bind_errors(nb::module_& m) {
  error_type = nb::borrow(PyErr_NewExceptionWithDoc(
      "metrale._metrale.Error", "A failure inside the runtime; `status` names its kind (not-found, invalid-argument, ...).",
      PyExc_RuntimeError, nullptr));
  refusal_type = nb::borrow(PyErr_NewExceptionWithDoc(
      "metrale._metrale.Refusal",
      "An explicit request (a backend by name, a lever, a lock) that cannot be honoured: the CLI's exit code 3.",
      error_type.ptr(), nullptr));
  m.attr("Error") = error_type;
  m.attr("Refusal") = refusal_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Refusal& e) {
      raise_error(refusal_type, e);
    } catch (const Error& e) {
      raise_error(error_type, e);
    }
  });
}

void bind_registry(nb::module_& m) {
  nb::class_<PyRuntime>(m, "Runtime", "The registry: manifests found, plugins loaded, backends to select.")
      .def("__init__", [](PyRuntime* self, std::optional<std::vector<std::string>> manifests, std::vector<std::string> installed_dirs,
                          std::vector<std::string> build_tree_dirs, bool use_default_dirs) {
        DiscoveryOptions options;
        if (manifests) options.manifests = std::vector<std::filesystem::path>(manifests->begin(), manifests->end());
        options.installed_dirs.assign(installed_dirs.begin(), installed_dirs.end());
        options.build_tree_dirs.assign(build_tree_dirs.begin(), build_tree_dirs.end());
        options.use_default_dirs = use_default_dirs;
        new (self) PyRuntime{layers::open_runtime(options)};
      }, nb::arg("manifests") = nb::none(), nb::arg("installed_dirs") = std::vector<std::string>{},
         nb::arg("build_tree_dirs") = std::vector<std::string>{}, nb::arg("use_default_dirs") = true,
         "Opens the runtime as the CLI does (docs/embedding.md, open_runtime): levers checked, manifests found, plugins loaded.")
      .def("entries", [](const PyRuntime& r) {
        nb::list out;
        for (const auto& e : r.registry.entries()) out.append(entry_dict(e));
        return out;
      }, "Every manifest found and what became of it: state and reason (`metrale list`).")
      .def("backends", [](const PyRuntime& r) {
        std::vector<std::shared_ptr<PyBackend>> out;
        for (const auto& e : r.registry.entries())
          if (e.state == EntryState::loaded && e.instance) out.push_back(r.wrap(e.instance));
        return out;
      }, "The loaded backends, in discovery order.")
      .def("select", [](const PyRuntime& r, std::optional<std::string> name) { return r.wrap(r.registry.select(name)); },
           nb::arg("name") = nb::none(),
           "The backend by name, else METRALE_BACKEND, else the highest priority; raises metrale.Refusal for a name that did not load.")
      .def("find", [](const PyRuntime& r, const std::string& name) { return r.wrap(r.registry.find(name)); }, nb::arg("name"),
           "The loaded backend of that name, or None.")
      .def("audit", [](const PyRuntime& r) { return rows_to_python(r.registry.audit()->snapshot()); },
           "The whole process's audit rows, as dicts.");
}

void bind_audit_locks_levers(nb::module_& m) {
  m.def("audit_json", [](nb::handle rows) { return render_audit_json(rows_from_python(rows)); }, nb::arg("rows"),
        "Audit rows as `metrale audit --json` prints them.");
  m.def("audit_table", [](nb::handle rows) { return render_audit_table(rows_from_python(rows)); }, nb::arg("rows"),
        "Audit rows as `metrale audit` prints them.");
  m.def("lock_differences", [](const std::string& lock_text, nb::handle current) {
        return lock_differences(parse_lock(lock_text, "lock"), python_to_json(current));
      }, nb::arg("lock_text"), nb::arg("current"), "Each difference between a lock (its text) and the current audit rows.");
  m.def("diff_audits", [](nb::handle before, nb::handle after) { return diff_audits(python_to_json(before), python_to_json(after)); },
        nb::arg("before"), nb::arg("after"), "Differences between two audits (rows or `metrale audit --json` documents) or locks.");
  m.def("levers", [] {
    nb::list out;
    for (const LeverSpec& spec : lever_specs()) {
      nb::dict d;
      d["name"] = std::string(spec.name);
      d["type"] = lever_type_name(spec.type);
      d["default"] = std::string(spec.default_text);
      d["meaning"] = std::string(spec.meaning);
      std::vector<std::string> choices(spec.choices.begin(), spec.choices.end());
      d["choices"] = choices;
      d["declared_by"] = std::string(spec.declared_by);
      d["declared_in"] = std::string(spec.declared_in);
      const auto value = lever_raw(spec.name);
      d["value"] = value ? nb::cast(*value) : nb::none();
      out.append(d);
    }
    return out;
  }, "Every METRALE_* lever declared so far (a Runtime declares the layers' and its manifests'), with its value.");
}

}  // namespace

// "file.py:12" of the Python code that called into the extension, for the audit row of a lookup.
std::string python_caller() {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return "";
  PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
  const nb::object filename = nb::borrow(code->co_filename);
  Py_DECREF(code);
  return text_of(filename) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
}

nlohmann::json python_to_json(nb::handle value) {
  return nlohmann::json::parse(nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(value)));
}

nb::object rows_to_python(const std::vector<AuditRow>& rows) {
  return nb::module_::import_("json").attr("loads")(render_audit_json(rows));
}

std::vector<AuditRow> rows_from_python(nb::handle rows) { return rows_from_json(python_to_json(rows)); }

void bind_runtime(nb::module_& m) {
  bind_errors(m);
  bind_registry(m);
  bind_audit_locks_levers(m);
}

}  // namespace metrale::python
