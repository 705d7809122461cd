// The one escaping of strings from outside the process: control characters become visible, everything else stays.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "base/printable.h"

namespace trainscope::reports {
namespace {

TEST(Printable, EscapesEveryControlCharacter) {
  EXPECT_EQ(printable("node\x1b]0;owned\x07"), "node\\x1b]0;owned\\x07");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("line\nnext\r\tx\x7f"), "line\\x0anext\\x0d\\x09x\\x7f");
  EXPECT_EQ(printable("\xc2\x9b"
                      "31m"),
            "\\xc2\\x9b31m")
      << "a C1 control (CSI) in UTF-8";
  EXPECT_EQ(printable("\x9b"
                      "31m"),
            "\\x9b31m")
      << "a C1 control byte that is not UTF-8";
  EXPECT_EQ(printable("bad \xff\xfe end"), "bad \\xff\\xfe end");
  EXPECT_EQ(printable("cut \xe6\x97"), "cut \\xe6\\x97") << "a sequence cut short";
  EXPECT_EQ(printable("over \xc0\xaf"), "over \\xc0\\xaf") << "an overlong form";
}

TEST(Printable, KeepsWhatIsPrintable) {
  for (const char* kept :
       {"node-a.example.com", "/home/ü/train.py", "日本語", "C:\\path\\x1b", "emoji \xf0\x9f\x99\x82", ""}) {
    EXPECT_EQ(printable(kept), kept);
    EXPECT_EQ(printable(printable(kept)), kept);
  }
  const std::string once = printable("\x1b[2J");
  EXPECT_EQ(printable(once), once) << "escaping twice changes nothing";
}

TEST(Printable, TextKeepsLinesAndTabs) {
  EXPECT_EQ(printable_text("Host: a\x1b[31m\n\tb\r\n"), "Host: a\\x1b[31m\n\tb\\x0d\n");
}

TEST(Printable, JsonStaysValidAndMeansTheSame) {
  const nlohmann::json value = {{"host",
                                 "a\x7f"
                                 "b\xc2\x9b"
                                 "c\x1b"},
                                {"ok", "ü"}};
  const std::string dumped = value.dump(2);
  const std::string shown = printable_json(dumped);
  EXPECT_EQ(shown.find('\x7f'), std::string::npos);
  EXPECT_EQ(shown.find("\xc2\x9b"), std::string::npos);
  EXPECT_NE(shown.find("\\u007f"), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\u009b"), std::string::npos) << shown;
  EXPECT_EQ(nlohmann::json::parse(shown), value);
}

}  // namespace
}  // namespace trainscope::reports
