// The CLIP BPE tokenizer (OpenAI CLIP, used by every SD text encoder), encoding as Hugging Face's CLIPTokenizer
// without ftfy: text is cleaned (control characters dropped, whitespace runs collapsed), lower-cased, split by
// CLIP's pattern (contractions, letter runs, single digits, runs of other symbols), each piece byte-encoded as
// GPT-2 does and merged by rank with "</w>" marking the end of a word.
//
// Files: vocab.json (token -> id) and merges.txt (a "#version" line, then one "a b" merge per line by rank), as
// in a diffusers folder's tokenizer/ directory, or tokenizer.json alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::sd {

class ClipTokenizer {
 public:
  // pad_token: "<|endoftext|>" for SD 1.x and SDXL's first encoder, "!" for OpenCLIP ones (SD 2.x, SDXL's
  // second): read from tokenizer_config.json / special_tokens_map.json when loading a folder.
  static ClipTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt,
                                  const std::string& pad_token = "<|endoftext|>");
  // A Hugging Face tokenizer.json of a CLIP BPE tokenizer (model.vocab and model.merges); pad_token empty: the
  // file's padding.pad_token, else "<|endoftext|>".
  static ClipTokenizer from_tokenizer_json(const std::string& path, const std::string& pad_token = "");
  // A diffusers tokenizer/ folder: vocab.json and merges.txt, or only tokenizer.json (what transformers 5 writes),
  // and the pad token from tokenizer_config.json or special_tokens_map.json when present.
  static ClipTokenizer from_folder(const std::string& dir);

  // Text (valid UTF-8, else Error(InvalidArgument)) -> ids, without BOS/EOS.
  std::vector<int32_t> encode(std::string_view text) const;
  // BOS, the first max_length - 2 ids, EOS, then pad ids up to max_length (what SD pipelines feed CLIP).
  std::vector<int32_t> encode_padded(std::string_view text, int max_length = 77) const;

  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t vocab_size() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::sd
