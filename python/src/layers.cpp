// SPDX-License-Identifier: MIT OR Apache-2.0
// The layers half of the extension: one decoder layer's FFN opened from a LayerRequest as
// `metrale run` opens it (layers/embed.hpp, the one composition), run on host arrays or device
// buffers, with what it resolved; and the kernel bench of `metrale bench` (tools/bench/report.hpp),
// returned as the JSON document `metrale bench --json` prints, which the Python half turns into
// objects.
#include "bindings.hpp"

#include <bench/report.hpp>
#include <embed.hpp>
#include <metrale/audit.hpp>
#include <metrale/status.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include <span>

namespace metrale::python {

namespace {

struct PyFfn {
  std::shared_ptr<PyBackend> owner;
  layers::EmbeddedFfn ffn;
};

// The tier options as the layers quote them in messages and the audit ("activations int8").
layers::TierAsk ask(const std::optional<std::string>& value, const char* by) {
  return value ? layers::TierAsk{*value, by} : layers::TierAsk{};
}

nb::dict info_dict(const layers::LayerInfo& info) {
  nb::dict d;
  d["model"] = info.model;
  d["weights_source"] = info.weights_source;
  d["layer"] = info.layer ? nb::cast(*info.layer) : nb::none();
  d["declared"] = info.declared;
  d["quantization"] = info.quantization;
  d["activations"] = info.activations;
  d["activations_source"] = info.activations_source;
  d["tiers"] = info.tiers;
  return d;
}

// The rows of a host array: bf16 [m, hidden] (bfloat16 or its uint16 bits), without a copy.
std::span<const uint16_t> rows_of(const nb::ndarray<nb::ro>& x, uint32_t hidden, uint32_t& m) {
  if (x.device_type() != nb::device::cpu::value)
    throw Error(Status::invalid_argument, "forward: x is on DLPack device " + std::to_string(x.device_type()) +
                                              "; host rows are needed (device buffers: forward_into)");
  if (!holds_bf16(x))
    throw Error(Status::invalid_argument, "forward: x must hold bf16 values (torch.bfloat16, ml_dtypes.bfloat16, or their "
                                          "uint16 bits); float32 is rounded by metrale.Ffn.forward");
  if (x.ndim() != 2 || x.shape(1) != hidden)
    throw Error(Status::invalid_argument, "forward: x must be [m, " + std::to_string(hidden) + "] (hidden_size), got " +
                                              std::to_string(x.ndim()) + " dimensions" +
                                              (x.ndim() == 2 ? " [" + std::to_string(x.shape(0)) + ", " + std::to_string(x.shape(1)) + "]" : ""));
  m = static_cast<uint32_t>(x.shape(0));
  return {static_cast<const uint16_t*>(x.data()), x.size()};
}

void bind_ffn(nb::module_& m) {
  nb::class_<PyFfn>(m, "EmbeddedFfn", "One decoder layer's FFN (docs/embedding.md); metrale.Ffn wraps it.")
      .def("__init__", [](PyFfn* self, std::shared_ptr<PyBackend> backend, std::string weights, std::string model,
                          std::optional<uint32_t> layer, uint64_t seed, std::optional<std::string> activations,
                          std::optional<std::string> weight_format, std::optional<std::string> expert_format,
                          std::optional<uint32_t> group_size, bool per_expert) {
        if (!backend) throw Error(Status::invalid_argument, "Ffn: backend is None");
        layers::LayerRequest request;
        request.weights = std::move(weights);
        request.model = std::move(model);
        request.layer = layer;
        request.seed = seed;
        request.activations = ask(activations, "activations");
        request.weight_format = ask(weight_format, "weight_format");
        request.expert_format = ask(expert_format, "expert_format");
        request.group_size = group_size;
        request.per_expert = per_expert;
        nb::gil_scoped_release release;
        new (self) PyFfn{backend, layers::EmbeddedFfn(backend->backend, request)};
      }, nb::arg("backend"), nb::arg("weights") = "", nb::arg("model") = "", nb::arg("layer") = nb::none(), nb::arg("seed") = 1,
         nb::arg("activations") = nb::none(), nb::arg("weight_format") = nb::none(), nb::arg("expert_format") = nb::none(),
         nb::arg("group_size") = nb::none(), nb::arg("per_expert") = false)
      .def_prop_ro("hidden_size", [](const PyFfn& f) { return f.ffn.hidden_size(); })
      .def_prop_ro("info", [](const PyFfn& f) { return info_dict(f.ffn.info()); })
      .def_prop_ro("backend", [](const PyFfn& f) { return f.owner; })
      .def("forward_bits", [](PyFfn& f, nb::handle x, uint64_t stream) {
        const nb::ndarray<nb::ro> array = borrow_array(x, "forward: x");
        uint32_t m = 0;
        const std::span<const uint16_t> rows = rows_of(array, f.ffn.hidden_size(), m);
        auto* y = new std::vector<uint16_t>();
        nb::capsule owner(y, [](void* p) noexcept { delete static_cast<std::vector<uint16_t>*>(p); });
        {
          nb::gil_scoped_release release;
          *y = f.ffn.forward_host(rows, m, stream);
        }
        const size_t shape[2] = {m, f.ffn.hidden_size()};
        return nb::ndarray<nb::numpy, uint16_t>(y->data(), 2, shape, owner);
      }, nb::arg("x"), nb::arg("stream") = 0, "y = FFN(x) on host rows, bf16 [m, hidden] in and out (as uint16 bits).")
      .def("forward_into", [](PyFfn& f, const PyBuffer& x, uint32_t m, PyBuffer& out, uint64_t stream) {
        const size_t bytes = size_t{m} * f.ffn.hidden_size() * 2;
        for (const PyBuffer* b : std::initializer_list<const PyBuffer*>{&x, &out}) {
          if (b->owner->backend != f.owner->backend)
            throw Error(Status::invalid_argument, "forward_into: a buffer of backend " + b->owner->backend->name() +
                                                      ", the layer runs on " + f.owner->backend->name());
          if (b->nbytes < bytes)
            throw Error(Status::invalid_argument, "forward_into: " + std::string(b == &x ? "x" : "out") + " holds " +
                                                      std::to_string(b->nbytes) + " bytes, " + std::to_string(m) +
                                                      " rows of bf16 [m, " + std::to_string(f.ffn.hidden_size()) + "] take " +
                                                      std::to_string(bytes));
        }
        nb::gil_scoped_release release;
        f.ffn.forward_into(x.ptr, m, out.ptr, stream);
      }, nb::arg("x"), nb::arg("m"), nb::arg("out"), nb::arg("stream") = 0,
         "y = FFN(x) from and into buffers of this backend, asynchronous on `stream`.")
      .def("plan", [](const PyFfn& f, uint32_t m) {
        nb::list out;
        for (const auto& step : f.ffn.plan(m)) {
          nb::dict d;
          d["step"] = step.step;
          d["kernel"] = step.kernel;
          d["why"] = step.why;
          d["grid"] = nb::make_tuple(step.grid[0], step.grid[1], step.grid[2]);
          out.append(d);
        }
        return out;
      }, nb::arg("m"), "The launches a forward of m rows takes (`metrale run`'s plan).")
      .def("audit_json", [](const PyFfn& f) { return render_audit_json(f.ffn.build_audit()); },
           "The audit rows the build appended (one per kernel lookup), as `--json` prints them.");
}

void bind_bench(nb::module_& m) {
  m.def("bench_json", [](const PyRuntime& runtime, std::string glob, std::vector<std::string> backends, std::string model,
                         std::vector<uint32_t> ms, uint32_t n, uint32_t k, std::string baseline, uint32_t warmup,
                         uint32_t repeat, uint32_t verify_columns, uint64_t seed) {
    bench::ReportRequest request;
    request.glob = std::move(glob);
    request.backends = std::move(backends);
    request.model = std::move(model);
    request.ms = std::move(ms);
    request.n = n;
    request.k = k;
    request.baseline = std::move(baseline);
    request.run.warmup = warmup;
    request.run.repeat = repeat;
    request.run.verify_columns = verify_columns;
    request.run.seed = seed;
    nb::gil_scoped_release release;
    const bench::Report report = bench::run_report(runtime.registry, request);
    nlohmann::json document = bench::report_json(report, request);
    document["unmatched"] = report.unmatched;
    return document.dump();
  }, nb::arg("runtime"), nb::arg("glob"), nb::arg("backends"), nb::arg("model"), nb::arg("ms"), nb::arg("n"), nb::arg("k"),
     nb::arg("baseline"), nb::arg("warmup"), nb::arg("repeat"), nb::arg("verify_columns"), nb::arg("seed"),
     "`metrale bench --json`'s document (metrale.bench makes objects of it), plus `unmatched`.");
}

}  // namespace

void bind_layers(nb::module_& m) {
  bind_ffn(m);
  bind_bench(m);
}

}  // namespace metrale::python
