// SPDX-License-Identifier: MIT OR Apache-2.0
// `metrale audit`: run every kernel selector (docs/layers.md, "Fallback chain") against the selected backend
// and print the rows their lookups left. A refusal still prints the rows gathered before it. With
// --model it resolves that model's FFN under the tier flags `metrale run` takes (tier_flags.hpp);
// each row then shows its site's tier, and --lock pins it (docs/quantization.md).
#include "commands.hpp"
#include "tier_flags.hpp"

#include <layers/compose.hpp>
#include <layers/linear/selectors.hpp>
#include <metrale/json_file.hpp>
#include <metrale/levers.hpp>
#include <metrale/lock.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace metrale::cli {

namespace {

struct AuditOptions {
  std::string backend;
  std::string model_type;
  std::string model;                 // preset or config.json: audit that model's FFN instead
  std::string lock;                  // write a lock of the resolutions here
  std::vector<std::string> diff;     // two audit or lock JSON files to compare
  std::string weights;                // a checkpoint: audit its layer's FFN in the formats it holds
  std::optional<uint32_t> layer;      // with --weights: which decoder layer
  TierFlags tiers;                   // with --model or --weights: the tiers to resolve it under
  std::string block = "ffn";         // ffn, attention, decoder (a checkpoint's layer) or model
};

// The model, checkpoint, layer and tiers the options name, as a layer request.
layers::LayerRequest layer_request(const AuditOptions& options) {
  layers::LayerRequest request;
  request.model = options.model;
  request.weights = options.weights;
  request.layer = options.layer;
  apply_tier_flags(options.tiers, request);
  return request;
}

// The FFN of a model (synthetic formats from the tier flags) or of a checkpoint's layer (the
// formats its weights load as, its declared activation tier as the default): the lookups
// `metrale run` would make, without uploading or launching anything; METRALE_LOCK enforced.
void resolve_model_ffn(Backend& backend, const AuditOptions& options) { layers::resolve_layer(backend, layer_request(options)); }

// --block attention|decoder|model: the lookups of `metrale run --block` or of `metrale generate`,
// made by building the same objects (the weights are loaded and uploaded; nothing is launched),
// so that a lock written here is the one those commands enforce. The builders enforce
// METRALE_LOCK themselves.
void build_block(Backend& backend, const AuditOptions& options) {
  layers::LayerRequest request = layer_request(options);
  if (options.block == "model") {
    layers::open_model(backend, request);
    return;
  }
  request.block = options.block == "decoder" ? layers::LayerBlock::decoder : layers::LayerBlock::attention;
  layers::open_block(backend, request);
}

// An audit or lock to compare: bounded, validated, every error naming the file and the field.
nlohmann::json read_resolutions(const std::string& file) {
  nlohmann::json doc = read_json_file(file, "audit or lock file", kMaxLockBytes);
  validate_resolutions(doc, file);
  return doc;
}

void run_diff(CliContext& ctx, const std::vector<std::string>& files) {
  const std::vector<std::string> lines = diff_audits(read_resolutions(files[0]), read_resolutions(files[1]));
  if (ctx.json) {
    std::cout << nlohmann::json{{"differences", lines}}.dump(2) << '\n';
  } else {
    for (const auto& line : lines) std::cout << line << '\n';
    if (lines.empty()) std::cout << "no differences\n";
  }
  // diff(1)'s convention: 1 when the inputs differ.
  if (!lines.empty()) ctx.exit_code = kExitError;
}

void print_rows(const CliContext& ctx, const Backend& backend, uint32_t min_k, const std::string& error) {
  auto rows = backend.audit_ptr()->snapshot();
  if (ctx.json) {
    nlohmann::json out{{"backend", backend.name()},
                       {"target", backend.target()},
                       {"w4a16_k64_min_k", min_k},
                       {"rows", nlohmann::json::parse(render_audit_json(rows))},
                       {"dropped_rows", backend.audit_ptr()->dropped()},
                       {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << "backend " << backend.name() << " (" << backend.target() << "), w4a16_k64_min_k = " << min_k << "\n";
  std::cout << render_audit_table(rows);
  if (const uint64_t dropped = backend.audit_ptr()->dropped()) {
    std::cout << dropped << " repeated lookup(s) not kept (the audit keeps the first " << AuditLog::kRowsPerKey
              << " and the latest of each)\n";
  }
}

void run_audit(CliContext& ctx, const AuditOptions& options) {
  if (!options.diff.empty()) return run_diff(ctx, options.diff);
  auto backend = ctx.registry().select(options.backend.empty() ? std::nullopt : std::optional(options.backend));
  backend->audit().clear();  // the audit shows this command's lookups only
  uint32_t min_k = layers::w4a16_k64_min_k();
  std::string error;
  try {
    if (options.block != "ffn") {
      build_block(*backend, options);
    } else if (!options.model.empty() || !options.weights.empty()) {
      resolve_model_ffn(*backend, options);
    } else {
      layers::w4a16_v2_kernel(*backend);
      layers::w4a16_v3_kernel(*backend);
      if (layers::tgemm_probe_ok(options.model_type)) layers::tgemm_kernel(*backend);
      try {
        layers::k64_kernel(*backend);
      } catch (const Refusal&) {
        throw;
      } catch (const Error& e) {
        // A required kernel that is missing is an error of this configuration, not of the
        // command: the row says so, and the exit code too.
        error = e.what();
        ctx.exit_code = kExitError;
      }
      layers::k64_n64_kernel(*backend);
    }
  } catch (const Refusal&) {
    print_rows(ctx, *backend, min_k, {});
    throw;
  }
  auto rows = backend->audit().snapshot();
  if (options.model.empty() && options.weights.empty()) enforce_lock(*backend, rows);  // the builders enforced their own
  print_rows(ctx, *backend, min_k, error);
  if (!options.lock.empty()) {
    write_lock(options.lock, *backend, rows);
    std::cerr << "metrale: wrote lock of " << rows.size() << " resolutions to " << options.lock << '\n';
  }
}

}  // namespace

void register_audit(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("audit", "Run every kernel selector against the selected backend; print the lookups");
  auto options = std::make_shared<AuditOptions>();
  cmd->add_option("--backend", options->backend, "Backend to audit (default: METRALE_BACKEND or highest priority)");
  cmd->add_option("--model-type", options->model_type,
                  "HF model_type; kimi_k3 and kimi_linear skip the tgemm lookup as their builders do");
  auto* model = cmd->add_option("--model", options->model,
                                "Audit the FFN layers of this preset or config.json (no weights, no launches)");
  auto* weights = cmd->add_option("--weights", options->weights,
                                  "Audit the FFN of this checkpoint's layer in the formats its weights hold (no launches)");
  cmd->add_option("--layer", options->layer, "With --weights: the decoder layer (default: the lowest with an FFN)")->needs(weights);
  add_tier_flags(*cmd, options->tiers);
  for (const char* flag : {"--weight-quantization", "--expert-quantization", "--group-size"}) {
    cmd->get_option(flag)->needs(model)->excludes(weights);
  }
  cmd->add_option("--block", options->block,
                  "What to resolve: ffn (default: a model's or layer's FFN, nothing loaded), attention or decoder (a "
                  "checkpoint layer's, as `metrale run --block`), model (as `metrale generate`); the last three load the "
                  "weights, so that a lock written here is the one those commands enforce")
      ->check(CLI::IsMember({"ffn", "attention", "decoder", "model"}));
  cmd->add_option("--lock", options->lock, "Write the resolved configuration to FILE (enforce it with METRALE_LOCK=FILE)");
  cmd->add_option("--diff", options->diff, "Compare two files from `metrale audit --json` or --lock; exit 1 if they differ")
      ->expected(2);
  cmd->callback([&ctx, options] {
    // An activation tier resolves an FFN: of a model or of a checkpoint, either will do.
    if (!options->tiers.activation_quantization.empty() && options->model.empty() && options->weights.empty()) {
      throw CLI::RequiresError("--activation-quantization", "--model or --weights");
    }
    run_audit(ctx, *options);
  });
}

}  // namespace metrale::cli
