// SPDX-License-Identifier: MIT OR Apache-2.0
// The tensors of a checkpoint: one .safetensors file, a sharded checkpoint's
// *.safetensors.index.json, or a directory holding either. Every tensor name resolves to one file.
//
// An index may name only shards inside its own directory: a shard path is relative, has no ".."
// and, symlinks resolved, stays in that directory — except the Hugging Face cache's own layout,
// where <repo>/snapshots/<revision>/<file> links to <repo>/blobs/<hash>. Anything else is refused
// before it is opened (docs/layers.md, "Checkpoint files").
#pragma once

#include "io/safetensors.hpp"

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace metrale::layers {

// An index lists every tensor of a checkpoint (a large one has ~100k): a few megabytes.
inline constexpr std::size_t kMaxIndexBytes = std::size_t{64} << 20;

// The shard names an index's weight_map lists, sorted and unique, each checked to be a plain
// relative path (not absolute, no "..", no NUL, at most 4096 bytes). `index` names the file in
// messages. Throws Error(invalid_argument) naming the index and the tensor whose entry is wrong.
std::vector<std::string> parse_checkpoint_index(std::string_view text, const std::filesystem::path& index);

// index's directory / shard, after checking that with symlinks resolved it stays inside that
// directory (or is a Hugging Face cache blob, see above). Throws Error naming both otherwise.
std::filesystem::path confine_shard(const std::filesystem::path& index, const std::string& shard);

class TensorSource {
 public:
  // Throws Error naming the path: not_found when nothing is there, invalid_argument when a file
  // is malformed or a shard leaves the checkpoint directory.
  explicit TensorSource(const std::filesystem::path& path);

  bool contains(const std::string& name) const { return owner_.contains(name); }
  // Throws Error(not_found) naming the checkpoint and the tensor.
  SafetensorsReader& at(const std::string& name) const;
  std::vector<std::string> names() const;
  // The one file's metadata; nullptr for a sharded checkpoint.
  const std::map<std::string, std::string>* metadata() const;
  // The index, the single file or the directory, for messages.
  const std::string& description() const { return description_; }
  // Bytes read from every file so far (headers and tensors; not mapped tensors' pages).
  uint64_t bytes_read() const noexcept;
  // The tensors' bytes in every file (the data sections), what a load reads once.
  uint64_t tensor_bytes() const;

 private:
  std::string description_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, SafetensorsReader*> owner_;
};

// A tensor a model keeps in float (a norm weight, a bias, the embedding table) as bf16 values of
// `shape`: BF16 as stored, F16 and F32 rounded to bf16 (the dtype every activation has here).
std::vector<uint16_t> read_bf16_tensor(const TensorSource& src, const std::string& name, const std::vector<uint64_t>& shape);
// The same as f32 values: F32 as stored (Qwen3.5 keeps A_log and the DeltaNet's norm in F32
// among bf16 tensors), BF16 and F16 widened exactly.
std::vector<float> read_f32_tensor(const TensorSource& src, const std::string& name, const std::vector<uint64_t>& shape);

}  // namespace metrale::layers
