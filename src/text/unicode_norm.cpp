// Unicode normalization forms (UAX #15): full decomposition, canonical ordering, canonical composition.
#include <algorithm>
#include <cstdint>
#include <tuple>

#include "rbee/text/unicode.h"
#include "rbee/text/utf8.h"
#include "text/unicode_tables.h"

namespace rbee::text {
namespace {

namespace ut = unicode_tables;

// Hangul syllables decompose and compose arithmetically.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t cp) {
  const ut::CombiningRange* end = ut::kCombiningClass + ut::kCombiningClassCount;
  const auto* it = std::upper_bound(ut::kCombiningClass, end, cp,
                                    [](uint32_t c, const ut::CombiningRange& r) { return c < r.first; });
  if (it == ut::kCombiningClass) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(uint32_t cp, bool compat, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const ut::Decomposition* end = ut::kDecomposition + ut::kDecompositionCount;
  const auto* it = std::lower_bound(ut::kDecomposition, end, cp,
                                    [](const ut::Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp || (it->compat && !compat)) {
    out.push_back(cp);
    return;
  }
  for (uint32_t k = 0; k < it->length; ++k) decompose(ut::kDecompositionData[it->offset + k], compat, out);
}

// The primary composite of (a, b), or 0 when there is none.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const ut::Composition* end = ut::kComposition + ut::kCompositionCount;
  const auto* it = std::lower_bound(ut::kComposition, end, std::pair<uint32_t, uint32_t>(a, b),
                                    [](const ut::Composition& c, const std::pair<uint32_t, uint32_t>& k) {
                                      return c.first != k.first ? c.first < k.first : c.second < k.second;
                                    });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  // ASCII is invariant under every form.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  const bool compat = form == UnicodeForm::NFKC || form == UnicodeForm::NFKD;
  const bool recompose = form == UnicodeForm::NFC || form == UnicodeForm::NFKC;

  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = 0;
    pos += static_cast<size_t>(utf8::decode(text, pos, &cp));
    decompose(cp, compat, cps);
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = combining_class(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, uint32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], cps[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) std::tie(ccc[k], cps[k]) = run[k - i];
    }
    i = j;
  }

  if (recompose && !cps.empty()) {
    // Canonical composition: each character combines with the last starter unless a character between them
    // blocks it (same or higher combining class, or a starter).
    size_t out = 0;
    size_t starter = SIZE_MAX;
    int last_ccc = -1;
    for (size_t i = 0; i < cps.size(); ++i) {
      const uint32_t cp = cps[i];
      const int c = ccc[i];
      // Not blocked: adjacent to the starter, or every character in between has a lower class.
      if (starter != SIZE_MAX && (out == starter + 1 || last_ccc < c)) {
        const uint32_t composite = compose_pair(cps[starter], cp);
        if (composite != 0) {
          cps[starter] = composite;
          continue;
        }
      }
      if (c == 0) {
        starter = out;
        last_ccc = 0;
      } else {
        last_ccc = c;
      }
      cps[out] = cp;
      ccc[out] = static_cast<uint8_t>(c);
      ++out;
    }
    cps.resize(out);
  }

  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : cps) utf8::append(result, cp);
  return result;
}

}  // namespace rbee::text
