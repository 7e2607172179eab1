#include "chat/unicode_text.h"

#include <utf8proc.h>

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

// Upper, lower or title case: Python's "cased" characters (categories Lu, Ll, Lt).
bool is_cased(char32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) append_utf8(out, map(next_code_point(text, pos)));
  return out;
}

utf8proc_category_t category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

bool is_letter(char32_t cp) { return category(cp) >= UTF8PROC_CATEGORY_LU && category(cp) <= UTF8PROC_CATEGORY_LO; }
bool is_number(char32_t cp) { return category(cp) >= UTF8PROC_CATEGORY_ND && category(cp) <= UTF8PROC_CATEGORY_NO; }

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
    auto c = category(next_code_point(text, pos));
    if (c == UTF8PROC_CATEGORY_LT || c == (lower ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL)) return false;
    cased = cased || c == (lower ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU);
  }
  return cased;
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
bool python_is_digit(std::string_view text) {
  return all_of_non_empty(text, [](char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; });
}
bool python_is_alpha(std::string_view text) { return all_of_non_empty(text, is_letter); }
bool python_is_alnum(std::string_view text) {
  return all_of_non_empty(text, [](char32_t cp) { return is_letter(cp) || is_number(cp); });
}
bool python_is_space(std::string_view text) { return all_of_non_empty(text, is_python_space); }

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

int64_t python_find(std::string_view text, std::string_view sub) {
  spend_scan(text.size());
  size_t at = text.find(sub);
  return at == text.npos ? -1 : code_point_length(text.substr(0, at));
}

int64_t python_count(std::string_view text, std::string_view sub) {
  spend_scan(text.size());
  if (sub.empty()) return code_point_length(text) + 1;
  int64_t count = 0;
  for (size_t at = text.find(sub); at != text.npos; at = text.find(sub, at + sub.size())) count++;
  return count;
}

}  // namespace probekit::chat
