// Printable: what an error may echo of a user's bytes. Expected strings are
// written out by hand, byte by byte.
#include "console/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace docmatch::console {
namespace {

TEST(Printable, KeepsValidTextNewlinesAndTabs) {
  EXPECT_EQ(Printable("plain ascii"), "plain ascii");
  EXPECT_EQ(Printable("Z\xC3\xBCrich \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80"),
            "Z\xC3\xBCrich \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80");  // Zürich 東京 😀
  EXPECT_EQ(Printable("line\nnext\ttab"), "line\nnext\ttab");
  EXPECT_EQ(Printable(""), "");
}

TEST(Printable, EscapesTerminalControls) {
  EXPECT_EQ(Printable("\x1B[31mred\x1B[0m"), "\\x1B[31mred\\x1B[0m");
  EXPECT_EQ(Printable("over\rwrite"), "over\\x0Dwrite");
  EXPECT_EQ(Printable(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(Printable("del\x7F"), "del\\x7F");
  EXPECT_EQ(Printable("c1 \xC2\x85 next line"), "c1 \\xC2\\x85 next line");  // U+0085, a C1 control
}

TEST(Printable, EscapesBytesThatAreNotUtf8) {
  EXPECT_EQ(Printable("a\xFF"
                      "b"),
            "a\\xFFb");
  EXPECT_EQ(Printable("cut \xE6\x9D"), "cut \\xE6\\x9D");  // a sequence cut short at the end
  EXPECT_EQ(Printable("\xE6\x9D"
                      "x"),
            "\\xE6\\x9Dx");                                 // cut short before an ASCII byte
  EXPECT_EQ(Printable("\xC0\xAF"), "\\xC0\\xAF");           // an overlong '/'
  EXPECT_EQ(Printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a UTF-16 surrogate
}

}  // namespace
}  // namespace docmatch::console
