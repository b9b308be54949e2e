// Printable (printable.h): ICU's UTF-8 decoding step by step, escaping what
// it rejects and the control characters it accepts.
#include "console/printable.h"

#include <unicode/utf8.h>

#include <cstdint>
#include <cstdio>

namespace docmatch::console {
namespace {

void Escape(const std::string& text, int32_t from, int32_t to, std::string* out) {
  for (int32_t i = from; i < to; ++i) {
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02X", static_cast<unsigned char>(text[i]));
    out->append(hex);
  }
}

}  // namespace

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(bytes, i, length, c);
    const bool control = c >= 0 && ((c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7F && c < 0xA0));
    if (c < 0 || control) {
      Escape(text, start, i, &out);
    } else {
      out.append(text, start, i - start);
    }
  }
  return out;
}

}  // namespace docmatch::console
