#include "chat/unicode_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <utility>

#include "chat/render_budget.h"
#include "chat/value.h"
#include "tokenizer/utf8.h"

namespace probekit::chat {

namespace {

using tokenizer::append_utf8;
using tokenizer::next_code_point;

char32_t to_upper(char32_t cp) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_lower(char32_t cp) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_title(char32_t cp) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

utf8proc_category_t category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

using CodePointInterval = std::pair<char32_t, char32_t>;

// Python's str.islower, isupper, istitle, swapcase and title go by Unicode's Lowercase and Uppercase properties:
// the categories Ll and Lu and these Other_Lowercase / Other_Uppercase characters (ª, ʰ, ⅰ, ⓐ; Ⅰ, Ⓐ, 🄰), as
// Python 3.11's Unicode 14 lists them.
constexpr CodePointInterval kOtherLowercase[] = {
    {0xAA, 0xAA},       {0xBA, 0xBA},       {0x2B0, 0x2B8},     {0x2C0, 0x2C1},     {0x2E0, 0x2E4},
    {0x345, 0x345},     {0x37A, 0x37A},     {0x1D2C, 0x1D6A},   {0x1D78, 0x1D78},   {0x1D9B, 0x1DBF},
    {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2170, 0x217F},   {0x24D0, 0x24E9},
    {0x2C7C, 0x2C7D},   {0xA69C, 0xA69D},   {0xA770, 0xA770},   {0xA7F8, 0xA7F9},   {0xAB5C, 0xAB5F},
    {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
};
constexpr CodePointInterval kOtherUppercase[] = {
    {0x2160, 0x216F}, {0x24B6, 0x24CF}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
};

template <size_t N>
bool in_intervals(const CodePointInterval (&intervals)[N], char32_t cp) {
  for (const auto& [first, last] : intervals) {
    if (cp >= first && cp <= last) return true;
  }
  return false;
}

bool is_lowercase(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LL || in_intervals(kOtherLowercase, cp); }
bool is_uppercase(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LU || in_intervals(kOtherUppercase, cp); }
bool is_titlecase(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LT; }
// Unicode's Cased property, which Python's title() looks at.
bool is_cased(char32_t cp) { return is_lowercase(cp) || is_uppercase(cp) || is_titlecase(cp); }

template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) append_utf8(out, map(next_code_point(text, pos)));
  return out;
}

bool is_letter(char32_t cp) { return category(cp) >= UTF8PROC_CATEGORY_LU && category(cp) <= UTF8PROC_CATEGORY_LO; }
bool is_number(char32_t cp) { return category(cp) >= UTF8PROC_CATEGORY_ND && category(cp) <= UTF8PROC_CATEGORY_NO; }

#include "chat/python_char_tables.inc"

bool is_digit(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND || in_intervals(kDigitsBeyondNd, cp); }
bool is_numeric(char32_t cp) { return is_number(cp) || in_intervals(kNumericBeyondN, cp); }
bool is_identifier_start(char32_t cp) {
  bool rule = is_letter(cp) || category(cp) == UTF8PROC_CATEGORY_NL || cp == '_';
  return rule != in_intervals(kIdentifierStartFlips, cp);
}
bool is_identifier_continue(char32_t cp) {
  utf8proc_category_t c = category(cp);
  bool rule = is_letter(cp) || c == UTF8PROC_CATEGORY_NL || cp == '_' || c == UTF8PROC_CATEGORY_MN ||
              c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_PC;
  return rule != in_intervals(kIdentifierContinueFlips, cp);
}

template <typename Predicate>
bool all_of_non_empty(std::string_view text, Predicate predicate) {
  if (text.empty()) return false;
  for (size_t pos = 0; pos < text.size();) {
    if (!predicate(next_code_point(text, pos))) return false;
  }
  return true;
}

// islower (lower = true) or isupper: no character of the other case or title case, and one of this case.
bool is_cased_as(std::string_view text, bool lower) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = next_code_point(text, pos);
    if (is_titlecase(cp) || (lower ? is_uppercase(cp) : is_lowercase(cp))) return false;
    cased = cased || (lower ? is_lowercase(cp) : is_uppercase(cp));
  }
  return cased;
}

// Python's str.splitlines() boundaries.
bool is_line_break(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
         cp == 0x2028 || cp == 0x2029;
}

// The part of a text a str method's start and end pick, as code point indices (start may pass the end).
struct TextWindow {
  std::string_view text;
  int64_t start;
  int64_t end;
};

// Where code point `index` starts in `text`, or the text's size for an index at or past its end.
size_t byte_offset(std::string_view text, int64_t index) {
  size_t pos = 0;
  for (int64_t i = 0; i < index && pos < text.size(); i++) next_code_point(text, pos);
  return pos;
}

// Python adjusts start and end as slice bounds: negative from the end, then clipped to the text.
TextWindow text_window(std::string_view text, const SliceBounds& bounds) {
  spend_scan(text.size());
  int64_t length = code_point_length(text);
  auto from_end = [length](int64_t index) { return index < 0 ? std::max<int64_t>(index + length, 0) : index; };
  int64_t start = bounds.start ? from_end(*bounds.start) : 0;
  int64_t end = bounds.end ? std::min(from_end(*bounds.end), length) : length;
  if (start >= end) return {std::string_view(), start, end};
  size_t from = byte_offset(text, start);
  return {text.substr(from, byte_offset(text.substr(from), end - start)), start, end};
}

// The characters at which jinja2's title filter starts a new word.
bool starts_jinja_word(char32_t cp) {
  return is_python_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  spend_scan(text.size());
  spend_bytes(static_cast<int64_t>(text.size() * sizeof(char32_t)));  // four bytes a code point, made before use
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(next_code_point(text, pos));
  return out;
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(out, cp);
  return out;
}

int64_t code_point_length(std::string_view text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80 ? 1 : 0;
  return count;
}

bool is_python_space(char32_t cp) { return tokenizer::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string python_upper(std::string_view text) { return map_code_points(text, to_upper); }

std::string python_lower(std::string_view text) { return map_code_points(text, to_lower); }

std::string python_capitalize(std::string_view text) {
  bool first = true;
  return map_code_points(text, [&](char32_t cp) {
    char32_t mapped = first ? to_title(cp) : to_lower(cp);
    first = false;
    return mapped;
  });
}

std::string python_title(std::string_view text) {
  bool previous_cased = false;
  return map_code_points(text, [&](char32_t cp) {
    char32_t mapped = previous_cased ? to_lower(cp) : to_title(cp);
    previous_cased = is_cased(cp);
    return mapped;
  });
}

std::string jinja_title(std::string_view text) {
  bool word_start = true;
  return map_code_points(text, [&](char32_t cp) {
    if (starts_jinja_word(cp)) {
      word_start = true;
      return cp;
    }
    char32_t mapped = word_start ? to_upper(cp) : to_lower(cp);
    word_start = false;
    return mapped;
  });
}

bool python_is_lower(std::string_view text) { return is_cased_as(text, true); }
bool python_is_upper(std::string_view text) { return is_cased_as(text, false); }
bool python_is_decimal(std::string_view text) {
  return all_of_non_empty(text, [](char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; });
}
bool python_is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}
bool python_is_alpha(std::string_view text) { return all_of_non_empty(text, is_letter); }
bool python_is_alnum(std::string_view text) {
  return all_of_non_empty(text, [](char32_t cp) { return is_letter(cp) || is_number(cp); });
}
bool python_is_space(std::string_view text) { return all_of_non_empty(text, is_python_space); }
bool python_is_digit(std::string_view text) { return all_of_non_empty(text, is_digit); }
bool python_is_numeric(std::string_view text) { return all_of_non_empty(text, is_numeric); }
bool python_is_identifier(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = 0;
  if (!is_identifier_start(next_code_point(text, pos))) return false;
  while (pos < text.size()) {
    if (!is_identifier_continue(next_code_point(text, pos))) return false;
  }
  return true;
}

bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}
bool python_is_printable(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    if (!is_printable(next_code_point(text, pos))) return false;
  }
  return true;
}

int64_t python_word_count(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = next_code_point(text, pos);
    bool word = cp == '_' || is_letter(cp) || is_number(cp);
    words += word && !in_word ? 1 : 0;
    in_word = word;
  }
  return words;
}

std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string cps = decode_utf8(text);
  std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strips = [&](char32_t cp) { return chars ? set.find(cp) != std::u32string::npos : is_python_space(cp); };
  size_t begin = 0;
  size_t end = cps.size();
  while (left && begin < end && strips(cps[begin])) begin++;
  while (right && end > begin && strips(cps[end - 1])) end--;
  return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit) {
  std::vector<std::string> pieces;
  if (sep) {
    size_t start = 0;
    spend_scan(text.size());
    for (size_t at; (maxsplit < 0 || int64_t(pieces.size()) < maxsplit) && (at = text.find(*sep, start)) != text.npos;) {
      spend_bytes(static_cast<int64_t>(sizeof(Value) + at - start));  // a piece as the list will hold it
      pieces.emplace_back(text.substr(start, at - start));
      start = at + sep->size();
    }
    pieces.emplace_back(text.substr(start));
    return pieces;
  }
  std::u32string cps = decode_utf8(text);
  size_t pos = 0;
  while (true) {
    while (pos < cps.size() && is_python_space(cps[pos])) pos++;
    if (pos == cps.size()) break;
    if (maxsplit >= 0 && int64_t(pieces.size()) == maxsplit) {  // the rest keeps its trailing whitespace
      pieces.push_back(encode_utf8(std::u32string_view(cps).substr(pos)));
      break;
    }
    size_t end = pos;
    while (end < cps.size() && !is_python_space(cps[end])) end++;
    spend_bytes(static_cast<int64_t>(sizeof(Value) + end - pos));
    pieces.push_back(encode_utf8(std::u32string_view(cps).substr(pos, end - pos)));
    pos = end;
  }
  return pieces;
}

std::string python_replace(std::string_view text, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement before every character and at the end
    int64_t done = 0;
    for (size_t pos = 0; pos < text.size();) {
      if (count < 0 || done < count) {
        spend_bytes(int64_t(replacement.size()));  // 'a' * 10**6 replacing '' with a long text would be long
        out += replacement;
        done++;
      }
      size_t start = pos;
      next_code_point(text, pos);
      out += text.substr(start, pos - start);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; done++) {
    size_t at = text.find(old, start);
    if (at == text.npos) break;
    spend_bytes(int64_t(replacement.size()));
    out += text.substr(start, at - start);
    out += replacement;
    start = at + old.size();
  }
  out += text.substr(start);
  return out;
}

int64_t python_find(std::string_view text, std::string_view sub, const SliceBounds& bounds, bool last) {
  TextWindow window = text_window(text, bounds);
  if (window.end - window.start < code_point_length(sub)) return -1;
  size_t at = last ? window.text.rfind(sub) : window.text.find(sub);
  return at == std::string_view::npos ? -1 : window.start + code_point_length(window.text.substr(0, at));
}

bool python_has_affix(std::string_view text, std::string_view affix, const SliceBounds& bounds, bool at_end) {
  TextWindow window = text_window(text, bounds);
  if (window.end - window.start < code_point_length(affix)) return false;  // a start past the end: not even ''
  const std::string_view in = window.text;
  return at_end ? in.substr(in.size() - affix.size()) == affix : in.substr(0, affix.size()) == affix;
}

int64_t python_count(std::string_view text, std::string_view sub, const SliceBounds& bounds) {
  TextWindow window = text_window(text, bounds);
  if (window.end - window.start < code_point_length(sub)) return 0;
  if (sub.empty()) return window.end - window.start + 1;
  int64_t count = 0;
  for (size_t at = window.text.find(sub); at != std::string_view::npos; at = window.text.find(sub, at + sub.size())) count++;
  return count;
}

std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> pieces;  // the last first, reversed at the end
  auto keep = [&](std::string piece) {
    spend_bytes(static_cast<int64_t>(sizeof(Value) + piece.size()));  // a piece as the list will hold it
    pieces.push_back(std::move(piece));
  };
  if (sep) {
    spend_scan(text.size());
    size_t end = text.size();
    for (size_t at; (maxsplit < 0 || int64_t(pieces.size()) < maxsplit) && end >= sep->size() &&
                    (at = text.rfind(*sep, end - sep->size())) != text.npos;) {
      keep(std::string(text.substr(at + sep->size(), end - at - sep->size())));
      end = at;
    }
    keep(std::string(text.substr(0, end)));
  } else {
    std::u32string cps = decode_utf8(text);
    for (size_t end = cps.size();;) {
      while (end > 0 && is_python_space(cps[end - 1])) end--;
      if (end == 0) break;
      size_t start = end;
      // At maxsplit the rest is one piece that keeps its leading whitespace.
      bool rest = maxsplit >= 0 && int64_t(pieces.size()) == maxsplit;
      while (start > 0 && (rest || !is_python_space(cps[start - 1]))) start--;
      keep(encode_utf8(std::u32string_view(cps).substr(start, end - start)));
      end = start;
    }
  }
  std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

std::vector<std::string> python_splitlines(std::string_view text, bool keepends) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t pos = 0; pos < text.size();) {
    size_t start = pos;
    char32_t cp = next_code_point(text, pos);
    if (!is_line_break(cp)) {
      line.append(text.substr(start, pos - start));
      continue;
    }
    if (cp == '\r' && pos < text.size() && text[pos] == '\n') pos++;
    if (keepends) line.append(text.substr(start, pos - start));
    spend_bytes(static_cast<int64_t>(sizeof(Value) + line.size()));
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

std::string python_swapcase(std::string_view text) {
  return map_code_points(text, [](char32_t cp) { return is_uppercase(cp) ? to_lower(cp) : is_lowercase(cp) ? to_upper(cp) : cp; });
}

std::string python_casefold(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    utf8proc_int32_t folded[8];  // a full case folding is at most three code points
    int boundclass = 0;
    utf8proc_ssize_t count = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(next_code_point(text, pos)), folded,
                                                     8, UTF8PROC_CASEFOLD, &boundclass);
    for (utf8proc_ssize_t i = 0; i < count && i < 8; i++) append_utf8(out, static_cast<char32_t>(folded[i]));
  }
  spend_bytes(static_cast<int64_t>(out.size()));  // a full folding may triple the text
  return out;
}

bool python_is_title(std::string_view text) {
  bool cased = false;
  bool previous_cased = false;
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = next_code_point(text, pos);
    if (is_uppercase(cp) || is_titlecase(cp)) {
      if (previous_cased) return false;
      previous_cased = cased = true;
    } else if (is_lowercase(cp)) {
      if (!previous_cased) return false;
      previous_cased = cased = true;
    } else {
      previous_cased = false;
    }
  }
  return cased;
}

std::string python_justify(std::string_view text, int64_t width, char32_t fill, Justify justify) {
  int64_t margin = width - code_point_length(text);
  if (margin <= 0) return std::string(text);
  // CPython's center puts the odd space on the left when the width is odd.
  int64_t left = justify == Justify::left ? 0 : justify == Justify::right ? margin : margin / 2 + (margin & width & 1);
  std::string fill_text;
  append_utf8(fill_text, fill);
  for (size_t byte = 0; byte < fill_text.size(); ++byte) spend_bytes(margin);  // margin * size may overflow
  std::string out;
  for (int64_t i = 0; i < left; i++) out += fill_text;
  out += text;
  for (int64_t i = left; i < margin; i++) out += fill_text;
  return out;
}

std::string python_zfill(std::string_view text, int64_t width) {
  int64_t margin = width - code_point_length(text);
  if (margin <= 0) return std::string(text);
  spend_bytes(margin);
  size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  return std::string(text.substr(0, sign)) + std::string(size_t(margin), '0') + std::string(text.substr(sign));
}

std::string python_expandtabs(std::string_view text, int64_t tabsize) {
  std::string out;
  int64_t column = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t start = pos;
    char32_t cp = next_code_point(text, pos);
    if (cp == '\t') {
      if (tabsize <= 0) continue;  // Python drops the tab
      int64_t spaces = tabsize - column % tabsize;
      spend_bytes(spaces);
      out.append(size_t(spaces), ' ');
      column += spaces;
      continue;
    }
    out.append(text.substr(start, pos - start));
    column = cp == '\n' || cp == '\r' ? 0 : column + 1;
  }
  return out;
}

}  // namespace probekit::chat
