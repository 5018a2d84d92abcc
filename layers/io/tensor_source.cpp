// SPDX-License-Identifier: MIT OR Apache-2.0
#include "io/tensor_source.hpp"
#include "io/config_json.hpp"

#include "core/numeric.hpp"

#include <metrale/json_file.hpp>
#include <metrale/regular_file.hpp>
#include <metrale/status.hpp>

#include <algorithm>
#include <set>
#include <system_error>

namespace metrale::layers {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void index_error(const fs::path& index, const std::string& what) {
  throw Error(Status::invalid_argument, index.string() + ": " + what);
}

// `inner` lies strictly inside `dir` (both absolute and normal: canonical paths).
bool inside(const fs::path& inner, const fs::path& dir) {
  const auto [d, i] = std::mismatch(dir.begin(), dir.end(), inner.begin(), inner.end());
  return d == dir.end() && i != inner.end();
}

// Hugging Face's cache: <repo>/snapshots/<revision>/<file> is a link to <repo>/blobs/<hash>.
bool hub_cache_blob(const fs::path& dir, const fs::path& target) {
  const fs::path snapshots = dir.parent_path();
  return snapshots.filename() == "snapshots" && inside(target, snapshots.parent_path() / "blobs");
}

void check_shard_name(const fs::path& index, const std::string& tensor, const std::string& shard) {
  const auto refuse = [&](const std::string& why) {
    index_error(index, "weight_map." + display_name(tensor) + ": shard \"" + display_name(shard) +
                           "\" is outside the checkpoint directory or not a file name: " + why);
  };
  if (shard.empty()) refuse("it is empty");
  if (shard.size() > 4096) refuse("it is longer than 4096 bytes");
  if (shard.find('\0') != std::string::npos) refuse("it contains a NUL character");
  const fs::path path(shard);
  if (path.is_absolute()) refuse("shard paths are relative to the index's directory");
  for (const auto& part : path) {
    if (part == "..") refuse("shard paths may not contain '..'");
  }
}

std::vector<fs::path> directory_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  if (ec) throw Error(Status::not_found, dir.string() + ": cannot list the checkpoint directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> parse_checkpoint_index(std::string_view text, const fs::path& index) {
  const nlohmann::json doc = parse_json(text, index.string());
  const config_json::Object root(doc, index.string(), "", "a JSON object (a checkpoint index)");
  const auto map = root.object("weight_map", "an object (tensor name -> shard file)");
  if (!map) root.malformed("weight_map", "an object (tensor name -> shard file)", nullptr);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : map->strings_by_key("a shard file name (a string)")) {
    if (shards.contains(shard)) continue;
    check_shard_name(index, tensor, shard);
    shards.insert(shard);
  }
  return {shards.begin(), shards.end()};
}

fs::path confine_shard(const fs::path& index, const std::string& shard) {
  const fs::path named = index.parent_path() / shard;
  std::error_code ec;
  const fs::path dir = fs::canonical(index.parent_path().empty() ? fs::path(".") : index.parent_path(), ec);
  if (ec) throw Error(Status::not_found, index.string() + ": cannot resolve the index's directory: " + ec.message());
  const fs::path target = fs::canonical(named, ec);
  if (ec) return named;  // nothing there (or a dangling link): opening it reports that
  if (!inside(target, dir) && !hub_cache_blob(dir, target)) {
    throw Error(Status::invalid_argument, index.string() + ": shard \"" + display_name(shard) + "\" resolves to " +
                                              target.string() + ", outside the checkpoint directory " + dir.string() +
                                              " (a symbolic link leading out of it is refused)");
  }
  return named;
}

TensorSource::TensorSource(const fs::path& path) {
  std::vector<fs::path> files;
  fs::path index;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::vector<fs::path> entries = directory_entries(path);
    for (const auto& entry : entries) {
      if (entry.filename().string().ends_with(".safetensors.index.json")) index = entry;
    }
    if (index.empty()) {
      for (const auto& entry : entries) {
        if (entry.extension() == ".safetensors") files.push_back(entry);
      }
      if (files.empty()) throw Error(Status::not_found, path.string() + ": no .safetensors files in this directory");
    }
  } else if (path.string().ends_with(".index.json")) {
    index = path;
  } else {
    files.push_back(path);
  }
  if (!index.empty()) {
    const auto shards = parse_checkpoint_index(read_regular_file(index, "checkpoint index", kMaxIndexBytes), index);
    for (const auto& shard : shards) files.push_back(confine_shard(index, shard));
    description_ = index.string();
  } else {
    description_ = files.size() == 1 ? files[0].string() : path.string();
  }
  for (const auto& f : files) {
    readers_.push_back(std::make_unique<SafetensorsReader>(f));
    for (const auto& name : readers_.back()->names()) owner_.emplace(name, readers_.back().get());
  }
}

SafetensorsReader& TensorSource::at(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) {
    throw Error(Status::not_found, description_ + ": tensor '" + display_name(name) + "': missing (" +
                                       std::to_string(owner_.size()) + " tensors in " + std::to_string(readers_.size()) +
                                       " file(s))");
  }
  return *it->second;
}

std::vector<std::string> TensorSource::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, reader] : owner_) out.push_back(name);
  return out;
}

uint64_t TensorSource::bytes_read() const noexcept {
  uint64_t total = 0;
  for (const auto& reader : readers_) total += reader->bytes_read();
  return total;
}

uint64_t TensorSource::tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, reader] : owner_) {
    const TensorInfo& t = reader->info(name);
    total += t.end - t.begin;
  }
  return total;
}

const std::map<std::string, std::string>* TensorSource::metadata() const {
  return readers_.size() == 1 ? &readers_[0]->metadata() : nullptr;
}

std::vector<uint16_t> read_bf16_tensor(const TensorSource& src, const std::string& name, const std::vector<uint64_t>& shape) {
  SafetensorsReader& r = src.at(name);
  if (r.info(name).dtype == Dtype::bf16) return r.read_u16(name, {Dtype::bf16}, shape);
  const std::vector<float> values = r.read_f32(name, shape);
  std::vector<uint16_t> out(values.size());
  f32_to_bf16(values, out);
  return out;
}

std::vector<float> read_f32_tensor(const TensorSource& src, const std::string& name, const std::vector<uint64_t>& shape) {
  return src.at(name).read_f32(name, shape);
}

}  // namespace metrale::layers
