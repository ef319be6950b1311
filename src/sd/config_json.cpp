// diffusers config files with Python's non-finite literals (sd/config_json.h).
#include "sd/config_json.h"

#include <fstream>
#include <sstream>

#include "rbee/core/error.h"
#include "rbee/formats/safetensors.h"

namespace rbee::sd {

namespace {

// `text` with NaN / Infinity / -Infinity outside strings replaced by null; `changed` says whether any was.
std::string null_non_finite(const std::string& text, bool* changed) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) out.push_back(text[++i]);
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const std::string w(word);
      if (text.compare(i, w.size(), w) == 0) {
        out += "null";
        i += w.size() - 1;
        replaced = *changed = true;
        break;
      }
    }
    if (!replaced) out.push_back(c);
  }
  return out;
}

}  // namespace

nlohmann::json read_config_json(const std::string& path) {
  try {
    return safetensors::read_json_file(path);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotFound) throw;
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    bool changed = false;
    const std::string text = null_non_finite(ss.str(), &changed);
    if (!changed) throw;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw;
    return j;
  }
}

}  // namespace rbee::sd
