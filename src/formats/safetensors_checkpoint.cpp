// safetensors checkpoints: one file or a sharded set described by model.safetensors.index.json, plus the
// config.json next to it.
#include <algorithm>
#include <filesystem>
#include <set>

#include "formats/json_header.h"
#include "formats/mmap_file.h"
#include "rbee/core/error.h"
#include "rbee/formats/safetensors.h"

namespace rbee::safetensors {

namespace fs = std::filesystem;
using nlohmann::json;

struct Checkpoint::Impl {
  std::string directory;
  std::vector<File> files;
  // Tensor name -> (file index, info inside that file).
  std::map<std::string, std::pair<size_t, const TensorInfo*>, std::less<>> tensors;
  json index_metadata;  // null for a single file
  bool has_config = false;
  json config;
};

json read_json_file(const std::string& path) {
  auto mapping = formats::MappedFile::open(path);
  const auto bytes = mapping->bytes();
  return formats::parse_json_strict(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path,
                                    0);
}

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A weight_map shard name must be a plain file name in the index's directory.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  const bool plain = !shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                     shard.find('\\') == std::string::npos && shard.find('\0') == std::string::npos;
  RBEE_CHECK_CODE(plain, ErrorCode::Io, "{}: weight_map: tensor '{}' maps to '{}', which is not a plain file name",
                  index_path, tensor, shard);
}

void add_file_tensors(Checkpoint::Impl& impl, size_t file_index) {
  const File& f = impl.files[file_index];
  for (const TensorInfo& t : f.tensors()) {
    auto [it, inserted] = impl.tensors.emplace(t.name, std::make_pair(file_index, &t));
    RBEE_CHECK_CODE(inserted, ErrorCode::Io, "{}: tensor '{}' is also in {}", f.path(), t.name,
                    impl.files[it->second.first].path());
  }
}

void open_index(Checkpoint::Impl& impl, const fs::path& index_path) {
  const std::string where = index_path.string();
  const json index = read_json_file(where);
  auto map_it = index.find("weight_map");
  RBEE_CHECK_CODE(map_it != index.end() && map_it->is_object(), ErrorCode::Io,
                  "{}: \"weight_map\" is missing or not an object", where);
  if (auto meta = index.find("metadata"); meta != index.end()) {
    RBEE_CHECK_CODE(meta->is_object() || meta->is_null(), ErrorCode::Io, "{}: \"metadata\" is {}, not an object",
                    where, meta->type_name());
    impl.index_metadata = *meta;
  }
  std::set<std::string> shards;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    RBEE_CHECK_CODE(it->is_string(), ErrorCode::Io, "{}: weight_map: tensor '{}' maps to {}, not a file name", where,
                    it.key(), it->type_name());
    check_shard_name(where, it.key(), it->get<std::string>());
    shards.insert(it->get<std::string>());
  }
  RBEE_CHECK_CODE(!shards.empty(), ErrorCode::Io, "{}: weight_map is empty", where);
  std::map<std::string, size_t> shard_index;
  for (const std::string& shard : shards) {  // each shard opened once, in name order
    RBEE_WITH_CONTEXT(fmt::format("shard of {}", where),
                      impl.files.push_back(File::open((fs::path(impl.directory) / shard).string())));
    shard_index.emplace(shard, impl.files.size() - 1);
    add_file_tensors(impl, impl.files.size() - 1);
  }
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    const size_t want = shard_index.at(it->get<std::string>());
    auto found = impl.tensors.find(it.key());
    RBEE_CHECK_CODE(found != impl.tensors.end() && found->second.first == want, ErrorCode::Io,
                    "{}: weight_map puts tensor '{}' in {}, but that shard has no such tensor", where, it.key(),
                    it->get<std::string>());
  }
}

void open_single(Checkpoint::Impl& impl, const fs::path& file) {
  impl.files.push_back(File::open(file.string()));
  add_file_tensors(impl, 0);
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  const fs::path p(path);
  std::error_code ec;
  const bool is_dir = fs::is_directory(p, ec);
  RBEE_CHECK_CODE(is_dir || fs::exists(p, ec), ErrorCode::NotFound, "safetensors checkpoint '{}' does not exist", path);
  if (is_dir) {
    impl->directory = p.string();
    if (is_regular(p / kIndexName)) {
      open_index(*impl, p / kIndexName);
    } else if (is_regular(p / "model.safetensors")) {
      open_single(*impl, p / "model.safetensors");
    } else {
      std::vector<fs::path> found;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        if (entry.path().extension() == ".safetensors" && is_regular(entry.path())) found.push_back(entry.path());
      }
      RBEE_CHECK_CODE(!found.empty(), ErrorCode::NotFound, "no {}, model.safetensors or other .safetensors file in {}",
                      kIndexName, path);
      RBEE_CHECK_CODE(found.size() == 1, ErrorCode::Io,
                      "{} holds {} .safetensors files but no {} saying how they fit together", path, found.size(),
                      kIndexName);
      open_single(*impl, found[0]);
    }
  } else {
    impl->directory = p.has_parent_path() ? p.parent_path().string() : std::string(".");
    if (p.extension() == ".json") {
      open_index(*impl, p);
    } else {
      open_single(*impl, p);
    }
  }
  const fs::path config = fs::path(impl->directory) / "config.json";
  if (is_regular(config)) {
    impl->config = read_json_file(config.string());
    impl->has_config = true;
  }
  Checkpoint c;
  c.impl_ = std::move(impl);
  return c;
}

const std::string& Checkpoint::directory() const { return impl_->directory; }
const std::vector<File>& Checkpoint::files() const { return impl_->files; }
size_t Checkpoint::tensor_count() const { return impl_->tensors.size(); }

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, where] : impl_->tensors) names.push_back(name);
  return names;
}

const TensorInfo* Checkpoint::find_tensor(std::string_view name) const {
  auto it = impl_->tensors.find(name);
  return it == impl_->tensors.end() ? nullptr : it->second.second;
}

const File& Checkpoint::file_of(std::string_view name) const {
  auto it = impl_->tensors.find(name);
  RBEE_CHECK_CODE(it != impl_->tensors.end(), ErrorCode::NotFound, "checkpoint {} has no tensor named '{}'",
                  impl_->directory, name);
  return impl_->files[it->second.first];
}

Tensor Checkpoint::tensor(std::string_view name, Device& cpu) const {
  const File& f = file_of(name);
  return f.tensor(*find_tensor(name), cpu);
}

const json& Checkpoint::index_metadata() const { return impl_->index_metadata; }
bool Checkpoint::has_config() const { return impl_->has_config; }

const json& Checkpoint::config() const {
  RBEE_CHECK_CODE(impl_->has_config, ErrorCode::NotFound, "no config.json in {}", impl_->directory);
  return impl_->config;
}

}  // namespace rbee::safetensors
