// safetensors reader: files written by the `safetensors` package (numpy API), single and sharded, compared
// with goldens read back by safetensors.safe_open (tools/goldens/make_safetensors_testdata.py); crafted
// malformed files must each give an Error(Io) naming the byte offset and the reason.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/harness.h"
#include "formats_test_util.h"
#include "rbee/core/half.h"
#include "rbee/formats/safetensors.h"

namespace rbee {
namespace {

namespace st = rbee::safetensors;
using nlohmann::json;
using test::expect_io_error;

std::string st_data(const std::string& name) { return test::source_path("tests/data/safetensors/" + name); }

json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path;
  return json::parse(f);
}

// The tensor's elements as doubles, read through a Tensor view (so shape, dtype and offsets all matter).
std::vector<double> tensor_values(const Tensor& t) {
  std::vector<double> out;
  switch (t.dtype()) {
    case DType::F32: for (float v : t.to_vector<float>()) out.push_back(v); break;
    case DType::F64: for (double v : t.to_vector<double>()) out.push_back(v); break;
    case DType::F16: for (f16 v : t.to_vector<f16>()) out.push_back((float)v); break;
    case DType::BF16: for (bf16 v : t.to_vector<bf16>()) out.push_back((float)v); break;
    case DType::I64: for (int64_t v : t.to_vector<int64_t>()) out.push_back((double)v); break;
    case DType::I32: for (int32_t v : t.to_vector<int32_t>()) out.push_back(v); break;
    case DType::U32: for (uint32_t v : t.to_vector<uint32_t>()) out.push_back(v); break;
    case DType::U8: for (uint8_t v : t.to_vector<uint8_t>()) out.push_back(v); break;
    default: ADD_FAILURE() << "unexpected dtype " << dtype_name(t.dtype());
  }
  return out;
}

void expect_tensor_matches(const st::File& f, const json& g) {
  const std::string name = g.at("name");
  const st::TensorInfo* info = f.find_tensor(name);
  ASSERT_NE(info, nullptr) << name;
  EXPECT_EQ(info->file_dtype, g.at("dtype").get<std::string>()) << name;
  EXPECT_EQ(st::dtype_from_safetensors(info->file_dtype), info->dtype) << name;
  EXPECT_EQ(info->shape.to_vector(), g.at("shape").get<std::vector<int64_t>>()) << name;
  const auto offsets = g.at("data_offsets").get<std::vector<uint64_t>>();
  EXPECT_EQ(info->offset, offsets[0]) << name;
  EXPECT_EQ(info->offset + info->bytes, offsets[1]) << name;
  EXPECT_EQ(std::to_string(test::golden_checksum(f.tensor_bytes(*info))), g.at("checksum").get<std::string>())
      << name;
  if (g.contains("values")) {
    const Tensor t = f.tensor(*info, test::cpu_device());
    EXPECT_EQ(t.shape(), info->shape);
    const std::vector<double> got = tensor_values(t);
    ASSERT_EQ(got.size(), g["values"].size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      const json& e = g["values"][i];
      // i64 extremes are not exactly doubles: compare integers as integers.
      if (info->dtype == DType::I64) {
        EXPECT_EQ(t.to_vector<int64_t>()[i], e.get<int64_t>()) << name << "[" << i << "]";
      } else {
        const double want = e.is_boolean() ? (e.get<bool>() ? 1.0 : 0.0) : e.get<double>();
        EXPECT_EQ(got[i], want) << name << "[" << i << "]";
      }
    }
  }
}

// ---- files written by the safetensors package ------------------------------------------------------

TEST(Safetensors, SingleFileMatchesGolden) {
  const json golden = load_json(st_data("single.golden.json"));
  for (int from_memory = 0; from_memory < 2; ++from_memory) {
    const std::vector<uint8_t> bytes = test::read_file_bytes(st_data("single.safetensors"));
    const st::File f = from_memory ? st::File::parse(bytes, "single") : st::File::open(st_data("single.safetensors"));
    using StringMap = std::map<std::string, std::string>;
    EXPECT_EQ(f.metadata(), golden.at("metadata").get<StringMap>());
    ASSERT_EQ(f.tensors().size(), golden.at("tensors").size());
    for (const json& g : golden["tensors"]) expect_tensor_matches(f, g);
    // tensors() is in data order.
    for (size_t i = 1; i < f.tensors().size(); ++i) EXPECT_LE(f.tensors()[i - 1].offset, f.tensors()[i].offset);
  }
}

TEST(Safetensors, ShardedCheckpointMatchesGolden) {
  const json golden = load_json(st_data("sharded.golden.json"));
  for (const std::string& path : {st_data("sharded"), st_data("sharded/model.safetensors.index.json")}) {
    const st::Checkpoint c = st::Checkpoint::open(path);
    EXPECT_EQ(c.files().size(), 2u);
    std::vector<std::string> names;
    for (const json& g : golden["tensors"]) names.push_back(g.at("name"));
    EXPECT_EQ(c.tensor_names(), names);
    EXPECT_EQ(c.tensor_count(), names.size());
    for (const json& g : golden["tensors"]) {
      const st::File& f = c.file_of(g.at("name").get<std::string>());
      EXPECT_EQ(std::filesystem::path(f.path()).filename(), g.at("file").get<std::string>());
      expect_tensor_matches(f, g);
      EXPECT_EQ(c.find_tensor(g.at("name").get<std::string>()), f.find_tensor(g.at("name").get<std::string>()));
    }
    EXPECT_EQ(c.index_metadata().at("total_size").get<uint64_t>(), golden.at("total_size").get<uint64_t>());
    ASSERT_TRUE(c.has_config());
    EXPECT_EQ(c.config().at("hidden_size"), 8);
    EXPECT_EQ(c.config().at("architectures")[0], "LlamaForCausalLM");
    try {
      (void)c.tensor("nope", test::cpu_device());
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::NotFound);
    }
  }
}

TEST(Safetensors, TensorOutlivesCheckpoint) {
  Tensor t;
  {
    const st::Checkpoint c = st::Checkpoint::open(st_data("sharded"));
    t = c.tensor("model.norm.weight", test::cpu_device());
  }
  EXPECT_TRUE(t.is_view());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(8, 1.0f));
}

TEST(Safetensors, SingleFileCheckpointsAndDirectories) {
  const st::Checkpoint direct = st::Checkpoint::open(st_data("single.safetensors"));
  EXPECT_EQ(direct.tensor_count(), 11u);
  EXPECT_FALSE(direct.has_config());
  EXPECT_TRUE(direct.index_metadata().is_null());
  try {
    (void)direct.config();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }

  test::TempDir dir("st");
  const auto single = test::read_file_bytes(st_data("single.safetensors"));
  try {
    st::Checkpoint::open(dir.path().string());
    FAIL() << "empty directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << e.what();
  }
  test::write_file_bytes(dir.file("diffusion_pytorch_model.safetensors"), single);
  EXPECT_EQ(st::Checkpoint::open(dir.path().string()).tensor_count(), 11u);
  test::write_file_bytes(dir.file("other.safetensors"), single);
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"2 .safetensors files"});
  test::write_file_bytes(dir.file("model.safetensors"), single);  // model.safetensors wins
  EXPECT_EQ(st::Checkpoint::open(dir.path().string()).files()[0].path(), dir.file("model.safetensors"));

  try {
    st::Checkpoint::open(dir.file("missing.safetensors"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << e.what();
  }
}

void write_text(const std::string& path, const std::string& text) {
  test::write_file_bytes(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

TEST(Safetensors, BadIndexFiles) {
  test::TempDir dir("st-index");
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    test::write_file_bytes(dir.file(shard), test::read_file_bytes(st_data(std::string("sharded/") + shard)));
  const std::string index = dir.file("model.safetensors.index.json");

  write_text(index, R"({"weight_map": {"model.norm.weight": "../model-00002-of-00002.safetensors"}})");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"not a plain file name"});
  write_text(index, R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"model.norm.weight", "no such tensor"});
  write_text(index, R"({"weight_map": {"x": 3}})");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"'x'", "not a file name"});
  write_text(index, R"({"metadata": {}})");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"weight_map"});
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); }, {"index.json: byte ", "invalid JSON"});
  write_text(index, R"({"weight_map": {"a": "missing.safetensors"}})");
  try {
    st::Checkpoint::open(dir.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << e.what();
  }
  // The same tensor in two shards.
  test::write_file_bytes(dir.file("model-00002-of-00002.safetensors"),
                         test::read_file_bytes(st_data("sharded/model-00001-of-00002.safetensors")));
  write_text(index, R"({"weight_map": {"model.embed.weight": "model-00001-of-00002.safetensors",
                                       "model.layers.0.w": "model-00002-of-00002.safetensors"}})");
  expect_io_error([&] { st::Checkpoint::open(dir.path().string()); },
                  {"is also in", "model-00001-of-00002.safetensors"});
}

TEST(Safetensors, ReadJsonFile) {
  test::TempDir dir("st-json");
  write_text(dir.file("config.json"), "{\"a\": [1, 2,, 3]}");
  // Byte 12 is the second comma.
  expect_io_error([&] { st::read_json_file(dir.file("config.json")); }, {"config.json: byte 12", "invalid JSON"});
  write_text(dir.file("config.json"), "{\"a\": 1, \"a\": 2}");
  expect_io_error([&] { st::read_json_file(dir.file("config.json")); }, {"key 'a' appears twice"});
  write_text(dir.file("config.json"), "[1]");
  expect_io_error([&] { st::read_json_file(dir.file("config.json")); }, {"not an object"});
  write_text(dir.file("config.json"), "{\"rope\": {\"type\": \"yarn\"}}");
  EXPECT_EQ(st::read_json_file(dir.file("config.json"))["rope"]["type"], "yarn");
  try {
    st::read_json_file(dir.file("nope.json"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }
}

TEST(Safetensors, UnsupportedDtypeIsRefusedWithTheTensorName) {
  expect_io_error([] { st::File::open(st_data("unsupported_i8.safetensors")); },
                  {"byte 8", "tensor 'bytes.i8'", "unsupported dtype 'I8'"});
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = test::read_file_bytes(st_data("single.safetensors"));
  const st::File whole = st::File::parse(bytes);
  uint64_t end = 0;
  for (const auto& t : whole.tensors()) end = std::max(end, whole.data_offset() + t.offset + t.bytes);
  ASSERT_EQ(end, bytes.size());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + (std::ptrdiff_t)n);
    expect_io_error([&] { st::File::parse(prefix, "cut"); }, {"cut: byte "}, "prefix " + std::to_string(n));
  }
}

// ---- crafted files ---------------------------------------------------------------------------------

std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, uint64_t declared_length = UINT64_MAX) {
  const uint64_t n = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) out.push_back((uint8_t)(n >> (8 * i)));  // little endian
  for (char c : header) out.push_back((uint8_t)c);
  for (size_t i = 0; i < data_bytes; ++i) out.push_back((uint8_t)(i * 7 + 1));
  return out;
}

st::File parse(const std::vector<uint8_t>& bytes) { return st::File::parse(bytes, "crafted"); }

TEST(SafetensorsCrafted, Bf16AndPaddedHeader) {
  // bf16 bits of 1.0, -2.0, 0.5; the header is padded with spaces to a multiple of 8 as writers do.
  std::string header = R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> bytes = make_file(header, 0);
  for (uint16_t bits : {0x3f80, 0xc000, 0x3f00}) {
    bytes.push_back((uint8_t)(bits & 0xff));
    bytes.push_back((uint8_t)(bits >> 8));
  }
  const st::File f = parse(bytes);
  const Tensor t = f.tensor("w", test::cpu_device());
  EXPECT_EQ(t.dtype(), DType::BF16);
  EXPECT_EQ(tensor_values(t), (std::vector<double>{1.0, -2.0, 0.5}));
}

TEST(SafetensorsCrafted, HeaderLength) {
  expect_io_error([] { parse(make_file("{}", 0, uint64_t{1} << 40)); }, {"byte 0", "exceeds the limit"});
  expect_io_error([] { parse(make_file("{}", 0, 1000)); }, {"byte 0", "runs past the end of the file"});
  expect_io_error([] { parse(make_file("{}", 0, 0)); }, {"byte 0", "cannot hold a JSON object"});
  expect_io_error([] { parse(make_file(" {}", 0)); }, {"byte 8", "not '{'"});
  expect_io_error([] { parse(std::vector<uint8_t>{1, 2, 3}); }, {"byte 0", "truncated"});
  EXPECT_TRUE(parse(make_file("{}", 0)).tensors().empty());
}

TEST(SafetensorsCrafted, JsonErrors) {
  expect_io_error([] { parse(make_file(R"({"a": {"dtype": "F32",})", 0)); }, {"invalid JSON"});
  expect_io_error([] { parse(make_file("{\"a\xff\": 1}", 0)); }, {"invalid JSON"});  // not UTF-8
  // A number too large for a double: nlohmann throws out_of_range, not parse_error (found by fuzz_safetensors).
  expect_io_error([] { parse(make_file(R"({"__metadata__": {"a": 1e999999}})", 0)); }, {"byte 8", "invalid JSON"});
  const std::string twice = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  expect_io_error([&] { parse(make_file(twice, 4)); }, {"byte 8", "key 'w' appears twice"});
  std::string deep = "{\"__metadata__\":";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}";
  expect_io_error([&] { parse(make_file(deep, 0)); }, {"nested deeper than 64"});
}

TEST(SafetensorsCrafted, MetadataErrors) {
  expect_io_error([] { parse(make_file(R"({"__metadata__": [1]})", 0)); }, {"__metadata__", "not an object"});
  expect_io_error([] { parse(make_file(R"({"__metadata__": {"k": 1}})", 0)); },
                  {"__metadata__", "'k'", "not a string"});
}

TEST(SafetensorsCrafted, EntryErrors) {
  auto entry = [](const std::string& body, size_t data = 64) { return make_file("{\"t\":" + body + "}", data); };
  expect_io_error([&] { parse(entry("[]")); }, {"tensor 't'", "not an object"});
  expect_io_error([&] { parse(entry(R"({"shape":[1],"data_offsets":[0,4]})")); }, {"tensor 't'", "\"dtype\""});
  expect_io_error([&] { parse(entry(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})")); },
                  {"tensor 't'", "unsupported dtype 'F8_E4M3'"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","data_offsets":[0,4]})")); }, {"tensor 't'", "\"shape\""});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "dimension -1 is not a non-negative integer"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "not a non-negative integer"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "9 dimensions"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "overflows"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]})")); },
                  {"tensor 't'", "overflows"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "overflows"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1]})")); }, {"tensor 't'", "\"data_offsets\""});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})")); },
                  {"tensor 't'", "\"data_offsets\""});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})")); },
                  {"tensor 't'", "end before they begin"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})")); },
                  {"tensor 't'", "hold 4 bytes but shape [2] of F32 needs 8"});
  // Past the end: reported at the tensor's data in the file.
  const std::string past = R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[60,76]}})";
  expect_io_error([&] { parse(make_file(past, 64)); },
                  {"byte " + std::to_string(8 + past.size() + 60), "tensor 't'", "past the end of the data section"});
  expect_io_error([&] { parse(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]})")); },
                  {"tensor 't'", "past the end"});
}

TEST(SafetensorsCrafted, OverlappingTensors) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  expect_io_error([&] { parse(make_file(header, 16)); },
                  {"byte " + std::to_string(8 + header.size() + 8), "tensor 'b'", "overlaps tensor 'a'"});
}

TEST(SafetensorsCrafted, MisalignedDataIsRefusedByTensor) {
  std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  if ((8 + header.size()) % 2 == 0) header += ' ';  // odd data offset
  const std::vector<uint8_t> bytes = make_file(header, 8);
  const st::File f = parse(bytes);
  EXPECT_EQ(f.tensor_bytes(f.tensors()[0]).size(), 8u);
  expect_io_error([&] { (void)f.tensor("t", test::cpu_device()); }, {"tensor 't'", "not aligned to 4"});
}

}  // namespace
}  // namespace rbee
