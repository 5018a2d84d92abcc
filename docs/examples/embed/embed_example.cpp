// SPDX-License-Identifier: MIT OR Apache-2.0
// Embedding metrale's layers (docs/embedding.md): open the runtime, pick a backend (the default
// one, or METRALE_BACKEND), open one decoder layer's FFN of a checkpoint directory, run it on rows
// in host memory and again on device buffers, print a few outputs and the audit rows.
//
//   embed_example CHECKPOINT_DIR LAYER M [OUT_DIR]
//
// The input is M deterministic rows, x[r][c] = bf16(sin(0.01 * (r * hidden + c) + 0.5)). With
// OUT_DIR the rows and the output are written as OUT_DIR/x.safetensors (tensor "x") and
// OUT_DIR/y.safetensors (tensor "y"), the files `metrale run --input / --output` reads and writes.
// Exit codes as the CLI's: 0 ok, 1 error, 2 usage, 3 refusal.
#include <metrale/layers/embed.hpp>
#include <metrale/layers/core/device_buffer.hpp>
#include <metrale/layers/core/numeric.hpp>
#include <metrale/layers/io/activation_io.hpp>
#include <metrale/audit.hpp>
#include <metrale/status.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace ml = metrale::layers;

std::optional<uint32_t> parse_count(const char* text) {
  try {
    size_t used = 0;
    const unsigned long value = std::stoul(text, &used);
    if (used == std::string(text).size() && value <= UINT32_MAX) return static_cast<uint32_t>(value);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::vector<uint16_t> input_rows(uint32_t m, uint32_t hidden) {
  std::vector<uint16_t> x(size_t{m} * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = ml::f64_to_bf16(std::sin(0.01 * static_cast<double>(i) + 0.5));
  return x;
}

void print_row(const char* label, const std::vector<uint16_t>& y, uint32_t row, uint32_t hidden) {
  std::printf("%s", label);
  for (uint32_t c = 0; c < 8 && c < hidden; ++c) std::printf(" %.6g", ml::bf16_to_f32(y[size_t{row} * hidden + c]));
  std::printf("\n");
}

// The same rows through the caller's own device buffers: forward_into writes the caller's `out`.
std::vector<uint16_t> run_on_device(ml::EmbeddedFfn& ffn, const std::vector<uint16_t>& x, uint32_t m) {
  metrale::Backend& backend = ffn.backend();
  ml::DeviceBuffer dx(backend, x.size() * sizeof(uint16_t));
  ml::DeviceBuffer dy(backend, x.size() * sizeof(uint16_t));
  dx.upload(std::span<const uint16_t>(x));
  ffn.forward_into(dx.ptr(), m, dy.ptr());
  return dy.download<uint16_t>(x.size());  // waits for the stream
}

// The lookups the layer's build made, as `metrale audit` prints them.
void print_audit(const ml::EmbeddedFfn& ffn) {
  std::printf("audit (%zu rows):\n%s", ffn.build_audit().size(), metrale::render_audit_table(ffn.build_audit()).c_str());
}

int run(const std::filesystem::path& checkpoint_dir, uint32_t layer, uint32_t m, const char* out_dir) {
  metrale::Registry registry = ml::open_runtime();
  std::shared_ptr<metrale::Backend> backend = registry.select();  // METRALE_BACKEND, else the default
  ml::LayerRequest request;
  request.weights = checkpoint_dir.string();  // its config.json gives the model
  request.layer = layer;
  ml::EmbeddedFfn ffn(backend, request);  // the checkpoint's activation tier, as `metrale run`
  const ml::LayerInfo& info = ffn.info();
  const uint32_t hidden = ffn.hidden_size();
  std::printf("backend  %s (%s)\n", backend->name().c_str(), backend->device_name().c_str());
  std::printf("layer    %u of %s: %s\n", info.layer.value_or(layer), info.weights_source.c_str(), info.declared.c_str());

  const std::vector<uint16_t> x = input_rows(m, hidden);
  const std::vector<uint16_t> y = ffn.forward_host(x, m);
  print_row("y[0][0:8]   ", y, 0, hidden);
  print_row("y[m-1][0:8] ", y, m - 1, hidden);
  const bool same = run_on_device(ffn, x, m) == y;
  std::printf("device buffers: %s\n", same ? "same output" : "DIFFERENT output");
  print_audit(ffn);
  if (out_dir) {
    const std::filesystem::path out(out_dir);
    ml::write_activations(out / "x.safetensors", "x", x, m, hidden);
    ml::write_activations(out / "y.safetensors", "y", y, m, hidden, {{"producer", "embed_example"}});
  }
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<uint32_t> layer = argc >= 4 ? parse_count(argv[2]) : std::nullopt;
  const std::optional<uint32_t> m = argc >= 4 ? parse_count(argv[3]) : std::nullopt;
  if (argc < 4 || argc > 5 || !layer || !m || *m == 0) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_DIR LAYER M [OUT_DIR]   (M >= 1 rows)\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], *layer, *m, argc == 5 ? argv[4] : nullptr);
  } catch (const metrale::Refusal& e) {
    std::fprintf(stderr, "refused: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
