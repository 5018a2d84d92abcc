// SPDX-License-Identifier: MIT OR Apache-2.0
// The spec files' entry points (one per file, registry.cpp's table lists them) and the pieces
// they share: the tensor table of a Llama-style decoder, its FFNs, the keys a family reads.
// Not installed.
#pragma once

#include "architectures/architecture.hpp"

#include <vector>

namespace metrale::layers {

std::vector<const ArchitectureSpec*> llama_specs();     // llama.cpp: llama, mistral, mixtral
std::vector<const ArchitectureSpec*> qwen2_specs();     // qwen2.cpp: qwen2, qwen2_moe
std::vector<const ArchitectureSpec*> qwen3_specs();     // qwen3.cpp: qwen3, qwen3_moe
std::vector<const ArchitectureSpec*> qwen3_hybrid_specs();  // qwen3_hybrid.cpp: qwen3_next, qwen3_5(_moe)_text, qwen3_5(_moe)
std::vector<const ArchitectureSpec*> deepseek_specs();  // deepseek.cpp: deepseek_v2, deepseek_v3 (FFN only)

namespace spec_parts {

// Embedding, final norm, lm_head, the layer norms and q/k/v/o (with q/k norm when asked).
std::vector<TensorEntry> decoder_tensors(bool qk_norm);
// A dense FFN under the layer's "mlp.": gate_proj, up_proj, down_proj.
std::vector<TensorEntry> dense_ffn_tensors();
// Qwen-style MoE under "mlp.": router "gate", experts per expert or fused; the gated shared
// expert when asked.
std::vector<TensorEntry> qwen_moe_tensors(bool shared_expert);
// The keys a MoE config of these families reads (io/config.cpp, config_moe.cpp).
std::vector<HonouredKey> moe_keys();
// Qwen's sliding-window keys: use_sliding_window must be false; sliding_window and
// max_window_layers are then inert; layer_types holds full_attention only.
std::vector<HonouredKey> qwen_attention_keys();
// The lists joined.
std::vector<TensorEntry> join(std::vector<TensorEntry> a, const std::vector<TensorEntry>& b);
std::vector<HonouredKey> join(std::vector<HonouredKey> a, const std::vector<HonouredKey>& b);

}  // namespace spec_parts

}  // namespace metrale::layers
