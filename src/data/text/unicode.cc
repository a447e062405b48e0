// data/text/unicode.cc: lookups into the generated tables, NFD, and strict UTF-8 coding.
#include "data/text/unicode.h"

#include <algorithm>
#include <cstdio>

#include "data/text/unicode_tables.h"
#include "unmask/error.h"

namespace unmask::text::unicode {
namespace {

constexpr uint8_t kFlagWhiteSpace = 1;
constexpr uint8_t kFlagCased = 2;
constexpr uint8_t kFlagCaseIgnorable = 4;

// Hangul syllable algorithm (Unicode chapter 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr char32_t kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulSCount = 19 * kHangulVCount * kHangulTCount;  // 11172 syllables

const tables::PropertyRun& property_run(char32_t cp) {
  // The run containing cp is the last one whose start is <= cp; run 0 starts at U+0000.
  const tables::PropertyRun* begin = tables::kPropertyRuns;
  const tables::PropertyRun* end = begin + tables::kPropertyRunCount;
  if (cp > 0x10FFFF) return end[-1];  // past the last run: unassigned
  auto it = std::upper_bound(begin, end, cp, [](char32_t value, const tables::PropertyRun& run) {
    return value < run.start;
  });
  return it[-1];
}

}  // namespace

const char* version() { return tables::kUnicodeVersion; }

Category category(char32_t cp) { return static_cast<Category>(property_run(cp).category); }

bool is_other(char32_t cp) {
  Category c = category(cp);
  return c == Category::Cc || c == Category::Cf || c == Category::Cs || c == Category::Co ||
         c == Category::Cn;
}

bool is_punctuation_category(char32_t cp) {
  Category c = category(cp);
  return c >= Category::Pc && c <= Category::Po;
}

bool is_white_space(char32_t cp) { return property_run(cp).flags & kFlagWhiteSpace; }
bool is_cased(char32_t cp) { return property_run(cp).flags & kFlagCased; }
bool is_case_ignorable(char32_t cp) { return property_run(cp).flags & kFlagCaseIgnorable; }
uint8_t combining_class(char32_t cp) { return property_run(cp).combining_class; }

void append_lowercase(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {  // ASCII fast path
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  const tables::LowercaseMulti* multi_end = tables::kLowercaseMulti + tables::kLowercaseMultiCount;
  const tables::LowercaseMulti* multi =
      std::find_if(tables::kLowercaseMulti, multi_end,
                   [cp](const tables::LowercaseMulti& m) { return m.code_point == cp; });
  if (multi != multi_end) {
    out.append(multi->mapping, multi->length);
    return;
  }
  // The run that may contain cp is the last one starting at or before it.
  const tables::LowercaseRun* begin = tables::kLowercaseRuns;
  const tables::LowercaseRun* end = begin + tables::kLowercaseRunCount;
  auto it = std::upper_bound(begin, end, cp, [](char32_t value, const tables::LowercaseRun& run) {
    return value < run.start;
  });
  if (it != begin) {
    const tables::LowercaseRun& run = it[-1];
    char32_t offset = cp - run.start;
    if (offset % run.step == 0 && offset / run.step < run.count) {
      out.push_back(static_cast<char32_t>(static_cast<int64_t>(cp) + run.delta));
      return;
    }
  }
  out.push_back(cp);
}

void append_nfd(std::u32string_view text, std::u32string& out) {
  const size_t first_new = out.size();
  for (char32_t cp : text) {
    if (cp < 0xC0) {  // nothing below U+00C0 decomposes
      out.push_back(cp);
    } else if (cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount) {
      char32_t s = cp - kHangulSBase;
      out.push_back(kHangulLBase + s / (kHangulVCount * kHangulTCount));
      out.push_back(kHangulVBase + (s % (kHangulVCount * kHangulTCount)) / kHangulTCount);
      if (s % kHangulTCount != 0) out.push_back(kHangulTBase + s % kHangulTCount);
    } else {
      const tables::Decomposition* begin = tables::kDecompositions;
      const tables::Decomposition* end = begin + tables::kDecompositionCount;
      auto it = std::lower_bound(begin, end, cp, [](const tables::Decomposition& d, char32_t v) {
        return d.code_point < v;
      });
      if (it != end && it->code_point == cp) {
        out.append(tables::kDecompositionPool + it->offset, it->length);
      } else {
        out.push_back(cp);
      }
    }
  }
  // Canonical ordering: within each run of non-starters, stable-sort by combining class.
  size_t i = first_new;
  while (i < out.size()) {
    if (out[i] < 0x300 || combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t run_end = i + 1;
    while (run_end < out.size() && out[run_end] >= 0x300 && combining_class(out[run_end]) != 0)
      ++run_end;
    if (run_end - i > 1) {
      std::stable_sort(out.begin() + i, out.begin() + run_end, [](char32_t a, char32_t b) {
        return combining_class(a) < combining_class(b);
      });
    }
    i = run_end;
  }
}

std::u32string decode_utf8(std::string_view bytes, std::string_view what) {
  std::u32string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    unsigned char b0 = s[i];
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    // Lead byte -> sequence length and the valid range of the second byte (Unicode Table 3-7),
    // which rules out overlongs (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and > U+10FFFF.
    int length = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    char32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3, cp = b0 & 0x0F;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4, cp = b0 & 0x07;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    bool valid = length != 0 && i + length <= n;
    for (int k = 1; valid && k < length; ++k) {
      unsigned char b = s[i + k];
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) valid = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (!valid) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b0);
      const char* why = length == 0        ? (b0 < 0xC0 ? "a stray continuation byte"
                                                        : "a byte that never starts UTF-8")
                        : i + length > n ? "a sequence cut off by the end of the input"
                                         : "an overlong, surrogate or out-of-range sequence";
      throw Error(what, ": invalid UTF-8 at byte offset ", i, " (byte ", hex, ", ", why, ")",
                  Hint("pass UTF-8 text; re-encode the input (e.g. iconv -f latin1 -t utf-8)"));
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(cp, out);
  return out;
}

}  // namespace unmask::text::unicode
