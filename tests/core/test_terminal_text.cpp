// Text shown on a terminal (control characters as visible escapes, the rest as it is), and typed text trimmed.
#include <doctest/doctest.h>

#include "common/terminal_text.h"
#include "common/utf8_text.h"

using probekit::terminal_text;
using probekit::trimmed;

TEST_CASE("terminal text: C0, DEL and C1 controls escaped, line breaks kept on request, UTF-8 left alone") {
  CHECK(terminal_text("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(terminal_text("bell\a") == "bell\\x07");
  CHECK(terminal_text("over\rwrite") == "over\\x0dwrite");
  CHECK(terminal_text("del\x7f") == "del\\x7f");
  CHECK(terminal_text(std::string("nul\0x", 5)) == "nul\\x00x");
  // U+009B is CSI, ESC [ in one code on terminals that read C1 controls; U+00A0 and the rest are text.
  CHECK(terminal_text("\xc2\x9b" "2J") == "\\u009b2J");
  CHECK(terminal_text("\xc2\x85|\xc2\xa0|") == "\\u0085|\xc2\xa0|");
  CHECK(terminal_text("café 日本 🙂") == "café 日本 🙂");
  CHECK(terminal_text("a\nb\tc") == "a\\x0ab\\x09c");
  CHECK(terminal_text("a\nb\tc\x1b", true) == "a\nb\tc\\x1b");
  CHECK(terminal_text("") == "");
}

TEST_CASE("display columns: wide East Asian characters and emoji take two, marks none, other code points one, bytes inside none") {
  using probekit::code_point_columns;
  using probekit::display_columns;
  CHECK(display_columns("") == 0);
  CHECK(display_columns("café") == 4);
  CHECK(display_columns("東京") == 4);
  CHECK(display_columns("한국어") == 6);
  CHECK(display_columns("a🙂b") == 4);
  CHECK(display_columns("Ångström") == 8);
  // Combining marks, joiners and variation selectors take no column (regression: one each, misaligning tables).
  CHECK(display_columns("e\u0301te\u0301") == 3);  // "été" with combining acute accents
  CHECK(display_columns("\u0e01\u0e34\u0e19") == 2);  // Thai "kin": the vowel sign sits above its consonant
  CHECK(display_columns("a\u200db\ufe0f\u2060") == 2);
  CHECK(display_columns("\u0928\u092e\u0938\u094d\u0924\u0947") == 4);  // Devanagari "namaste": virama, vowel sign
  const std::string tokyo = "東京";
  CHECK(code_point_columns(tokyo, 0) == 2);
  CHECK(code_point_columns(tokyo, 1) == 0);
  // A cut sequence counts as one column, as a terminal shows its replacement character.
  CHECK(display_columns(std::string("\xe6\x9d")) == 1);
}

TEST_CASE("trimmed: blanks at either end go, blanks inside stay, all-blank text is empty") {
  CHECK(trimmed(" \t mlp_out\r\n") == "mlp_out");
  CHECK(trimmed("resid post") == "resid post");
  CHECK(trimmed(" \t\r\n").empty());
  CHECK(trimmed("").empty());
  CHECK(trimmed("x") == "x");
}
