// base/utf8.h: what is well-formed UTF-8 (RFC 3629) and how the rest is written into the JSON.
#include <gtest/gtest.h>

#include <string>

#include "base/utf8.h"

namespace ddpbench {
namespace {

TEST(Utf8, WellFormedTextHasNoInvalidByteAndIsKeptAsItIs) {
  for (const std::string text : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_FALSE(first_invalid_utf8(text)) << text;
    EXPECT_EQ(escape_invalid_utf8(text), text);
  }
}

TEST(Utf8, EachKindOfIllFormedSequenceIsFoundAtItsFirstByte) {
  EXPECT_EQ(first_invalid_utf8("r\xff.json"), 1u);          // never a UTF-8 byte
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);              // a lone continuation byte
  EXPECT_EQ(first_invalid_utf8("x\xc3"), 1u);               // cut short
  EXPECT_EQ(first_invalid_utf8("\xc0\xaf"), 0u);            // overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xe0\x80\xaf"), 0u);        // overlong, three bytes
  EXPECT_EQ(first_invalid_utf8("ok\xed\xa0\x80"), 2u);      // a UTF-16 surrogate
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xc3\xa9\xe2\x82"), 2u);    // valid, then cut short
}

TEST(Utf8, IllFormedBytesAreWrittenAsBackslashXHexAndTheRestKept) {
  EXPECT_EQ(escape_invalid_utf8("host\xff" "name"), "host\\xFFname");
  EXPECT_EQ(escape_invalid_utf8("caf\xc3\xa9\xc3"), "caf\xc3\xa9\\xC3");
  EXPECT_EQ(escape_invalid_utf8("\xed\xa0\x80"), "\\xED\\xA0\\x80");
  EXPECT_FALSE(first_invalid_utf8(escape_invalid_utf8("\xfe\xff\x80 mixed \xe2\x82\xac")));
}

}  // namespace
}  // namespace ddpbench
