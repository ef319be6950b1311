// GGUF reader: the default model and small files written by gguf-py's GGUFWriter are compared with goldens
// made by gguf-py's GGUFReader (tools/goldens/make_gguf_*.py); crafted malformed files must each give an
// Error(Io) naming the byte offset and the reason.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/harness.h"
#include "formats_test_util.h"
#include "rbee/formats/gguf.h"

namespace rbee {
namespace {

using gguf::Value;
using gguf::ValueType;
using nlohmann::json;
using test::expect_io_error;

std::string gguf_data(const std::string& name) { return test::source_path("tests/data/gguf/" + name); }

json load_golden(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing golden " << path;
  return json::parse(f);
}

// ---- golden comparison -----------------------------------------------------------------------------

// Serializes array elements the way the golden script does before checksumming them.
void append_le(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
uint64_t array_checksum(const Value& v) {
  std::vector<uint8_t> bytes;
  for (const Value& e : v.as_array()) {
    switch (e.type()) {
      case ValueType::String: {
        const uint64_t n = e.as_string().size();
        append_le(bytes, &n, 8);
        append_le(bytes, e.as_string().data(), n);
        break;
      }
      case ValueType::F32: case ValueType::F64: {
        const double d = e.as_float();
        append_le(bytes, &d, 8);
        break;
      }
      case ValueType::Bool: {
        const int64_t i = e.as_bool() ? 1 : 0;
        append_le(bytes, &i, 8);
        break;
      }
      case ValueType::U64: {
        const uint64_t u = e.as_uint();
        append_le(bytes, &u, 8);
        break;
      }
      default: {
        const int64_t i = e.as_int();
        append_le(bytes, &i, 8);
        break;
      }
    }
  }
  return test::golden_checksum(bytes);
}

void expect_scalar_eq(const Value& v, const json& expected, const std::string& where) {
  switch (v.type()) {
    case ValueType::String: EXPECT_EQ(v.as_string(), expected.get<std::string>()) << where; break;
    case ValueType::Bool: EXPECT_EQ(v.as_bool(), expected.get<bool>()) << where; break;
    case ValueType::F32: case ValueType::F64: EXPECT_EQ(v.as_float(), expected.get<double>()) << where; break;
    case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
      EXPECT_EQ(v.as_uint(), expected.get<uint64_t>()) << where;
      break;
    default: EXPECT_EQ(v.as_int(), expected.get<int64_t>()) << where; break;
  }
}

void expect_array_eq(const Value& v, const json& g, const std::string& where) {
  ASSERT_EQ(v.type(), ValueType::Array) << where;
  EXPECT_EQ(gguf::value_type_name(v.array_type()), g.at("array_type").get<std::string>()) << where;
  ASSERT_EQ(v.array_size(), g.at("length").get<size_t>()) << where;
  if (v.array_type() != ValueType::Array) {
    EXPECT_EQ(std::to_string(array_checksum(v)), g.at("checksum").get<std::string>()) << where;
  }
  const std::vector<Value> elements = v.as_array();
  auto check_element = [&](size_t i, const json& e) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (v.array_type() == ValueType::Array) {
      expect_array_eq(elements[i], e, at);
    } else {
      EXPECT_EQ(elements[i].type(), v.array_type()) << at;
      expect_scalar_eq(elements[i], e, at);
    }
  };
  if (g.contains("values")) {
    for (size_t i = 0; i < elements.size(); ++i) check_element(i, g["values"][i]);
  } else {
    const json& head = g.at("head");
    const json& tail = g.at("tail");
    for (size_t i = 0; i < head.size(); ++i) check_element(i, head[i]);
    for (size_t i = 0; i < tail.size(); ++i) check_element(elements.size() - tail.size() + i, tail[i]);
  }
}

void expect_matches_golden(const gguf::File& f, const json& g) {
  EXPECT_EQ(f.version(), g.at("version").get<uint32_t>());
  EXPECT_EQ(f.alignment(), g.at("alignment").get<uint64_t>());
  EXPECT_EQ(f.data_offset(), g.at("data_offset").get<uint64_t>());
  EXPECT_EQ(f.file_size(), g.at("file_size").get<uint64_t>());

  const json& meta = g.at("metadata");
  ASSERT_EQ(f.metadata().size(), meta.size());
  for (size_t i = 0; i < meta.size(); ++i) {
    const auto& [key, value] = f.metadata()[i];
    const std::string& gkey = meta[i].at("key").get_ref<const std::string&>();
    ASSERT_EQ(key, gkey) << "metadata #" << i;
    EXPECT_EQ(f.find(key), &value) << key;
    EXPECT_EQ(gguf::value_type_name(value.type()), meta[i].at("type").get<std::string>()) << key;
    if (value.type() == ValueType::Array) {
      expect_array_eq(value, meta[i], key);
    } else {
      expect_scalar_eq(value, meta[i].at("value"), key);
    }
  }

  const json& tensors = g.at("tensors");
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    const json& gt = tensors[i];
    ASSERT_EQ(t.name, gt.at("name").get<std::string>()) << "tensor #" << i;
    EXPECT_EQ(f.find_tensor(t.name), &t);
    EXPECT_EQ(dtype_info(t.dtype).ggml_type, gt.at("ggml_type").get<int>()) << t.name;
    EXPECT_EQ(t.shape.to_vector(), gt.at("shape").get<std::vector<int64_t>>()) << t.name;
    EXPECT_EQ(t.offset, gt.at("offset").get<uint64_t>()) << t.name;
    EXPECT_EQ(t.bytes, gt.at("bytes").get<uint64_t>()) << t.name;
    EXPECT_EQ(std::to_string(test::golden_checksum(f.tensor_bytes(t))), gt.at("checksum").get<std::string>())
        << t.name;
  }
}

// ---- the default model -----------------------------------------------------------------------------

TEST(Gguf, DefaultModelMatchesGolden) {
  ASSERT_TRUE(std::filesystem::exists(RBEE_DEFAULT_MODEL)) << RBEE_DEFAULT_MODEL << " is missing: run scripts/setup.sh";
  const gguf::File f = gguf::File::open(RBEE_DEFAULT_MODEL);
  EXPECT_EQ(f.path(), RBEE_DEFAULT_MODEL);
  expect_matches_golden(f, load_golden(gguf_data("SmolLM2-135M-Instruct.Q4_1.golden.json")));
}

TEST(Gguf, DefaultModelTypedGetters) {
  const gguf::File f = gguf::File::open(RBEE_DEFAULT_MODEL);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_FALSE(f.get_int("no.such.key").has_value());
  EXPECT_TRUE(f.get_string_array("no.such.key").empty());
  try {
    (void)f.get_string("llama.block_count");
    FAIL() << "expected a type error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("llama.block_count"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("u32"), std::string::npos) << e.what();
  }
}

TEST(Gguf, DefaultModelTensorViewsTheMapping) {
  Tensor t;
  std::vector<uint8_t> expected;
  {
    const gguf::File f = gguf::File::open(RBEE_DEFAULT_MODEL);
    const gguf::TensorInfo* info = f.find_tensor("token_embd.weight");
    ASSERT_NE(info, nullptr);
    t = f.tensor(*info, test::cpu_device());
    const auto bytes = f.tensor_bytes(*info);
    EXPECT_EQ(t.data(), bytes.data());  // a view, not a copy
    expected.assign(bytes.begin(), bytes.begin() + 4096);
  }
  // The File is gone; the tensor's keepalive holds the mapping.
  EXPECT_TRUE(t.is_view());
  EXPECT_EQ(t.shape(), Shape({49152, 576}));
  EXPECT_EQ(t.dtype(), DType::Q8_0);  // ggml type 8 in the golden
  EXPECT_EQ(t.nbytes(), 49152 * 576 / 32 * 34);
  EXPECT_EQ(std::memcmp(t.data(), expected.data(), expected.size()), 0);
}

// ---- small files written by gguf-py ----------------------------------------------------------------

class GgufWriterFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufWriterFiles, MatchGolden) {
  const std::string path = gguf_data(GetParam() + ".gguf");
  const json golden = load_golden(gguf_data(GetParam() + ".golden.json"));
  expect_matches_golden(gguf::File::open(path), golden);
  // Parsing from memory gives the same result.
  const std::vector<uint8_t> bytes = test::read_file_bytes(path);
  expect_matches_golden(gguf::File::parse(bytes, GetParam()), golden);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufWriterFiles, ::testing::Values("all_types_v3", "all_types_v2", "aligned64_v3"));

TEST(Gguf, AllTypesValuesAndTensors) {
  const gguf::File f = gguf::File::open(gguf_data("all_types_v3.gguf"));
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i64"), -(int64_t{1} << 62) - 7);
  EXPECT_EQ(f.find("t.u64")->as_uint(), UINT64_MAX);
  EXPECT_THROW((void)f.get_int("t.u64"), Error);  // above INT64_MAX
  EXPECT_EQ(f.get_float("t.f32"), (double)0.1f);
  EXPECT_EQ(f.get_float("t.u16"), 60000.0);
  EXPECT_EQ(f.get_bool("t.bool_true"), true);
  EXPECT_EQ(f.get_bool("t.bool_false"), false);
  EXPECT_EQ(f.get_int_array("a.i8"), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_THROW((void)f.get_int_array("a.u64"), Error);  // 2^64-1 does not fit
  EXPECT_EQ(f.get_float_array("a.u32"), (std::vector<double>{0, 4294967295.0, 7}));
  EXPECT_EQ(f.get_string_array("a.string"), (std::vector<std::string>{"alpha", "", "\u03b3\u03b1\u03bc\u03bc\u03b1"}));
  EXPECT_THROW((void)f.get_string_array("a.i32"), Error);
  const std::vector<Value> nested = f.find("a.nested3")->as_array();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].as_array()[1].as_int_array(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.find("a.vocab")->to_string(), "array<string>[300]");
  EXPECT_EQ(f.find("t.u32")->to_string(), "u32 4000000000");

  // Tensor values, against what the generator wrote (arange * 1.5 - 2, row-major [2, 3]).
  const Tensor t = f.tensor("f32.2x3", test::cpu_device());
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{-2.0f, -0.5f, 1.0f, 2.5f, 4.0f, 5.5f}));
  EXPECT_EQ(f.tensor("i32.5", test::cpu_device()).to_vector<int32_t>(),
            (std::vector<int32_t>{-3, 0, 7, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(f.find_tensor("f32.2x1x3x2")->shape, Shape({2, 1, 3, 2}));
  EXPECT_EQ(f.find_tensor("q8_0.2x64")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find_tensor("q8_0.2x64")->shape, Shape({2, 64}));
  EXPECT_EQ(f.find_tensor("bf16.2x4")->dtype, DType::BF16);
  try {
    (void)f.tensor("missing", test::cpu_device());
    FAIL() << "expected NotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }
}

TEST(Gguf, BigEndianFileIsRefused) {
  expect_io_error([] { gguf::File::open(gguf_data("big_endian_v3.gguf")); }, {"byte 4", "big-endian"});
}

TEST(Gguf, UnsupportedTensorTypeIsRefusedWithTheTensorName) {
  expect_io_error([] { gguf::File::open(gguf_data("unsupported_i8.gguf")); },
                  {"tensor 'bytes.i8'", "unsupported ggml type 24", "i8"});
}

TEST(Gguf, MissingFileAndNonFiles) {
  try {
    gguf::File::open(gguf_data("does-not-exist.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << e.what();
  }
  expect_io_error([] { gguf::File::open(gguf_data("")); }, {"not a regular file"});
  test::TempDir dir("gguf");
  test::write_file_bytes(dir.file("empty.gguf"), {});
  expect_io_error([&] { gguf::File::open(dir.file("empty.gguf")); }, {"byte 0", "truncated", "magic"});
}

// Every strict prefix of a valid file is refused with an offset, never a crash.
TEST(Gguf, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = test::read_file_bytes(gguf_data("all_types_v3.gguf"));
  ASSERT_GT(bytes.size(), 1000u);
  // The file may end with padding after the last tensor; cutting only padding leaves a valid file.
  const gguf::File whole = gguf::File::parse(bytes);
  uint64_t end = 0;
  for (const auto& t : whole.tensors()) end = std::max(end, whole.data_offset() + t.offset + t.bytes);
  ASSERT_LE(end, bytes.size());
  for (size_t n = 0; n <= bytes.size(); ++n) {
    // Copy into an exactly sized buffer so ASan would see a read past the prefix.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + (std::ptrdiff_t)n);
    if (n < end) {
      expect_io_error([&] { gguf::File::parse(prefix, "cut"); }, {"cut: byte "}, "prefix " + std::to_string(n));
    } else {
      EXPECT_EQ(gguf::File::parse(prefix, "cut").tensors().size(), whole.tensors().size());
    }
  }
}

// ---- crafted malformed files -----------------------------------------------------------------------

// Writes GGUF bytes field by field, remembering where fields start so tests can predict error offsets.
class Builder {
 public:
  template <class T>
  Builder& put(T v) {
    append_le(b, &v, sizeof(T));
    return *this;
  }
  Builder& str(std::string_view s) {
    put<uint64_t>(s.size());
    append_le(b, s.data(), s.size());
    return *this;
  }
  Builder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    append_le(b, "GGUF", 4);
    return put(version).put(n_tensors).put(n_kv);
  }
  Builder& kv_u32(std::string_view key, uint32_t v) { return str(key).put((uint32_t)ValueType::U32).put(v); }
  Builder& kv_string(std::string_view key, std::string_view v) {
    return str(key).put((uint32_t)ValueType::String).str(v);
  }
  // dims innermost first, as stored.
  Builder& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type, uint64_t offset) {
    str(name).put((uint32_t)dims.size());
    for (uint64_t d : dims) put(d);
    put(ggml_type);
    last_offset_field = b.size();
    return put(offset);
  }
  Builder& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Builder& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  size_t pos() const { return b.size(); }

  std::vector<uint8_t> b;
  size_t last_offset_field = 0;
};

constexpr uint32_t kF32 = 0;

gguf::File parse(const Builder& w) { return gguf::File::parse(w.b, "crafted"); }

TEST(GgufCrafted, BaselineParses) {
  Builder w;
  w.header(3, 2, 1).kv_string("general.name", "x").tensor("a", {4}, kF32, 0).tensor("b", {2, 2}, kF32, 32).pad(32);
  const uint64_t data_at = w.pos();
  w.zeros(48);
  const gguf::File f = parse(w);
  EXPECT_EQ(f.data_offset(), data_at);
  EXPECT_EQ(f.tensors()[1].shape, Shape({2, 2}));
  EXPECT_EQ(f.tensors()[1].bytes, 16u);
}

TEST(GgufCrafted, WrongMagic) {
  Builder w;
  w.header(3, 0, 0);
  w.b[0] = 'X';
  expect_io_error([&] { parse(w); }, {"byte 0", "not a GGUF file"});
}

TEST(GgufCrafted, Version1And4) {
  Builder v1;
  v1.header(1, 0, 0);
  expect_io_error([&] { parse(v1); }, {"byte 4", "version 1 is not supported"});
  Builder v4;
  v4.header(4, 0, 0);
  expect_io_error([&] { parse(v4); }, {"byte 4", "unsupported GGUF version 4"});
  Builder be;
  be.header(0x03000000u, 0, 0);
  expect_io_error([&] { parse(be); }, {"byte 4", "big-endian"});
}

TEST(GgufCrafted, ImpossibleCounts) {
  Builder kv;
  kv.header(3, 0, uint64_t{1} << 60);
  expect_io_error([&] { parse(kv); }, {"byte 16", "metadata count 1152921504606846976 is impossible"});
  Builder tn;
  tn.header(3, 1000, 0).zeros(100);
  expect_io_error([&] { parse(tn); }, {"byte 8", "tensor count 1000 is impossible"});
}

TEST(GgufCrafted, StringLengthPastTheEnd) {
  Builder w;
  w.header(3, 0, 1);
  const size_t at = w.pos();
  w.put<uint64_t>(1000).zeros(10);
  expect_io_error([&] { parse(w); }, {"byte " + std::to_string(at), "metadata pair #0", "key length 1000"});
  Builder v;
  v.header(3, 0, 1).str("k").put((uint32_t)ValueType::String);
  const size_t vat = v.pos();
  v.put<uint64_t>(UINT64_MAX);
  expect_io_error([&] { parse(v); }, {"byte " + std::to_string(vat), "key 'k'", "runs past the end"});
}

TEST(GgufCrafted, HugeArrayCount) {
  Builder w;
  w.header(3, 0, 1).str("arr").put((uint32_t)ValueType::Array).put((uint32_t)ValueType::U32);
  const size_t at = w.pos();
  w.put<uint64_t>(uint64_t{1} << 61).zeros(64);
  expect_io_error([&] { parse(w); }, {"byte " + std::to_string(at), "key 'arr'", "array of 2305843009213693952 u32"});
}

TEST(GgufCrafted, ValueTypeErrors) {
  Builder unknown;
  unknown.header(3, 0, 1).str("k");
  const size_t at = unknown.pos();
  unknown.put<uint32_t>(13).zeros(8);
  expect_io_error([&] { parse(unknown); }, {"byte " + std::to_string(at), "key 'k'", "unknown value type 13"});

  Builder boolean;
  boolean.header(3, 0, 1).str("flag").put((uint32_t)ValueType::Bool);
  const size_t bat = boolean.pos();
  boolean.put<uint8_t>(2);
  expect_io_error([&] { parse(boolean); }, {"byte " + std::to_string(bat), "key 'flag'", "bool value is 2"});

  Builder dup;
  dup.header(3, 0, 2).kv_u32("k", 1);
  const size_t dat = dup.pos();
  dup.kv_u32("k", 2);
  expect_io_error([&] { parse(dup); }, {"byte " + std::to_string(dat), "key 'k'", "duplicate metadata key"});
}

TEST(GgufCrafted, NestingDepthIsLimited) {
  Builder w;
  w.header(3, 0, 1).str("deep").put((uint32_t)ValueType::Array);
  for (int i = 0; i < 100; ++i) w.put((uint32_t)ValueType::Array).put<uint64_t>(1);
  w.put((uint32_t)ValueType::U8).put<uint64_t>(0).zeros(1000);
  expect_io_error([&] { parse(w); }, {"key 'deep'", "nested deeper than 8"});

  // Eight levels are fine, and empty arrays are fine.
  Builder ok;
  ok.header(3, 0, 1).str("deep").put((uint32_t)ValueType::Array);
  for (int i = 0; i < gguf::kMaxArrayNesting - 1; ++i) ok.put((uint32_t)ValueType::Array).put<uint64_t>(1);
  ok.put((uint32_t)ValueType::U8).put<uint64_t>(0);
  const gguf::File f = parse(ok);
  EXPECT_EQ(f.find("deep")->array_size(), 1u);
}

TEST(GgufCrafted, AlignmentChecks) {
  for (uint32_t bad : {0u, 48u, 3u}) {
    Builder w;
    w.header(3, 0, 1);
    const size_t at = w.pos();
    w.kv_u32("general.alignment", bad);
    expect_io_error([&] { parse(w); }, {"byte " + std::to_string(at), "general.alignment", "not a power of two"});
  }
  Builder wrong_type;
  wrong_type.header(3, 0, 1).kv_string("general.alignment", "32");
  expect_io_error([&] { parse(wrong_type); }, {"general.alignment", "must be u32"});

  Builder custom;
  custom.header(3, 1, 1).kv_u32("general.alignment", 256).tensor("t", {8}, kF32, 0).pad(256).zeros(32);
  const gguf::File f = parse(custom);
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset(), 256u);
}

TEST(GgufCrafted, MisalignedOffset) {
  Builder w;
  w.header(3, 1, 0).tensor("t", {4}, kF32, 16).pad(32).zeros(64);
  expect_io_error([&] { parse(w); },
                  {"byte " + std::to_string(w.last_offset_field), "tensor 't'", "not a multiple of the alignment 32"});
}

TEST(GgufCrafted, OffsetPastTheEnd) {
  Builder w;
  w.header(3, 1, 0).tensor("t", {4}, kF32, 64).pad(32).zeros(64);  // [64, 80) in a 64-byte data section
  expect_io_error([&] { parse(w); },
                  {"byte " + std::to_string(w.last_offset_field), "tensor 't'", "past the end of the data section"});
  Builder huge;
  huge.header(3, 1, 0).tensor("t", {4}, kF32, uint64_t{1} << 63).pad(32).zeros(64);
  expect_io_error([&] { parse(huge); }, {"tensor 't'", "past the end"});
  Builder no_data;
  no_data.header(3, 1, 0).tensor("t", {4}, kF32, 0).zeros(1);  // the data section would start past the end
  expect_io_error([&] { parse(no_data); }, {"past the end of the file"});
}

TEST(GgufCrafted, OverlappingTensors) {
  Builder w;
  w.header(3, 3, 0).tensor("a", {16}, kF32, 0).tensor("z", {0}, kF32, 32);  // empty tensors overlap nothing
  w.tensor("b", {4}, kF32, 32);
  const size_t b_at = w.last_offset_field;
  w.pad(32).zeros(96);
  expect_io_error([&] { parse(w); }, {"byte " + std::to_string(b_at), "tensor 'b'", "overlaps tensor 'a'"});
}

TEST(GgufCrafted, TensorInfoErrors) {
  // Field offsets inside a tensor info of name "t": n_dims at +9, dims from +13, type 12 bytes before the end.
  constexpr size_t kInfoStart = 24;  // right after a header with no metadata
  Builder unknown;
  unknown.header(3, 1, 0).tensor("t", {4}, 200, 0).pad(32).zeros(64);
  expect_io_error([&] { parse(unknown); }, {"byte " + std::to_string(unknown.last_offset_field - 4), "tensor 't'",
                                            "unsupported ggml type 200"});

  Builder dims5;
  dims5.header(3, 1, 0).tensor("t", {1, 1, 1, 1, 1}, kF32, 0).pad(32).zeros(64);
  expect_io_error([&] { parse(dims5); }, {"byte " + std::to_string(kInfoStart + 9), "tensor 't'", "5 dimensions"});

  Builder absurd;
  absurd.header(3, 1, 0).tensor("t", {1, uint64_t{1} << 63}, kF32, 0).pad(32).zeros(64);
  expect_io_error([&] { parse(absurd); },
                  {"byte " + std::to_string(kInfoStart + 13 + 8), "tensor 't'", "dimension 1 is 9223372036854775808"});

  Builder overflow;
  overflow.header(3, 1, 0).tensor("t", {uint64_t{1} << 40, uint64_t{1} << 40}, kF32, 0).pad(32).zeros(64);
  expect_io_error([&] { parse(overflow); }, {"tensor 't'", "overflows"});

  Builder zero_hides_overflow;  // 0 elements, but shape code multiplying the other dims would overflow
  zero_hides_overflow.header(3, 1, 0).tensor("t", {0, uint64_t{1} << 40, uint64_t{1} << 40}, kF32, 0).pad(32);
  expect_io_error([&] { parse(zero_hides_overflow); }, {"tensor 't'", "overflows"});

  Builder bytes_overflow;  // numel fits in int64, bytes do not
  bytes_overflow.header(3, 1, 0).tensor("t", {uint64_t{1} << 62}, kF32, 0).pad(32).zeros(64);
  expect_io_error([&] { parse(bytes_overflow); }, {"tensor 't'", "overflows"});

  Builder block;
  block.header(3, 1, 0).tensor("q", {48, 2}, 8 /* q8_0 */, 0).pad(32).zeros(128);
  expect_io_error([&] { parse(block); }, {"tensor 'q'", "row length 48 is not a multiple of the q8_0 block size 32"});

  Builder dup;
  dup.header(3, 2, 0).tensor("t", {4}, kF32, 0);
  const size_t dat = dup.pos();
  dup.tensor("t", {4}, kF32, 32).pad(32).zeros(64);
  expect_io_error([&] { parse(dup); }, {"byte " + std::to_string(dat), "duplicate tensor name"});
}

TEST(GgufCrafted, MisalignedAddressIsRefusedByTensor) {
  Builder w;
  w.header(3, 1, 1).kv_u32("general.alignment", 1).tensor("t", {2}, kF32, 1);
  const size_t data_at = w.pos();
  w.zeros(9);
  // Place the tensor (data_at + 1 into the file) at an odd address inside a malloc'd (aligned) buffer.
  std::vector<uint8_t> storage(w.b.size() + 16);
  const size_t shift = data_at % 2;
  std::memcpy(storage.data() + shift, w.b.data(), w.b.size());
  const gguf::File f = gguf::File::parse(std::span<const uint8_t>(storage.data() + shift, w.b.size()), "odd");
  EXPECT_EQ(f.tensor_bytes(f.tensors()[0]).size(), 8u);
  expect_io_error([&] { (void)f.tensor(f.tensors()[0], test::cpu_device()); }, {"tensor 't'", "not aligned to 4"});
}

}  // namespace
}  // namespace rbee
