// Unicode data for normalization, generated into unicode_tables.cpp by tools/gen_unicode_tables.py.
// Every table is sorted by its first field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rbee::text::unicode_tables {

struct CombiningRange {
  uint32_t first, last;
  uint8_t ccc;  // canonical combining class (nonzero)
};
struct Decomposition {
  uint32_t cp;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;
  uint8_t compat;   // 1: compatibility decomposition (NFKD/NFKC only)
};
struct Composition {
  uint32_t first, second, composite;
};

extern const char* const kUnicodeVersion;
extern const CombiningRange kCombiningClass[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecomposition[];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompositionData[];
extern const Composition kComposition[];
extern const size_t kCompositionCount;

}  // namespace rbee::text::unicode_tables
