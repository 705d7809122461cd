// A JSON document written piece by piece prints exactly what nlohmann's dump(2) of the whole document prints.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/printable.h"
#include "reports/json_stream.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;

std::string dumped(const json& value) { return value.dump(2, ' ', false, json::error_handler_t::replace); }

// Streams `value` one container level at a time: every object and array opened, filled and closed by hand, down to
// `depth` levels; deeper values are given whole.
void stream(const json& value, JsonStream& out, int depth) {
  if (depth == 0 || !value.is_structured()) {
    out.value(value);
    return;
  }
  if (value.is_object()) {
    out.begin_object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      out.key(it.key());
      stream(it.value(), out, depth - 1);
    }
    out.end_object();
  } else {
    out.begin_array();
    for (const json& element : value) stream(element, out, depth - 1);
    out.end_array();
  }
}

std::string streamed(const json& value, int depth, std::vector<std::string>* pieces = nullptr) {
  std::string text;
  JsonStream out([&](std::string_view piece) {
    text += piece;
    if (pieces != nullptr) pieces->emplace_back(piece);
  });
  stream(value, out, depth);
  out.finish();
  return text;
}

const json& sample() {
  static const json value = {
      {"run_dir", "/tmp/run"},
      {"empty_object", json::object()},
      {"empty_array", json::array()},
      {"null", nullptr},
      {"numbers", {0, -1, uint64_t{18446744073709551615u}, 1.5, true, false}},
      {"strings", {"", "quote \" backslash \\ tab \t newline \n", "esc \x1b[2J del \x7f c1 \xc2\x9b", "bad \xff\xfe"}},
      {"ranks",
       {{{"file", "rank0.tsrec"}, {"records", {{{"index", 0}, {"flags", json::array()}, {"python", nullptr}}}}},
        {{"file", "rank1.tsrec"}, {"records", json::array()}}}},
      {"nested", {{"a", {{"b", {{"c", {1, {{"d", json::object()}}}}}}}}}}};
  return value;
}

TEST(JsonStream, PrintsWhatDumpPrintsAtEveryDepth) {
  for (int depth = 0; depth <= 6; ++depth) EXPECT_EQ(streamed(sample(), depth), dumped(sample())) << "depth " << depth;
  for (const json& value : {json(nullptr), json(42), json("text"), json::object(), json::array(), json({1, 2})})
    EXPECT_EQ(streamed(value, 3), dumped(value)) << dumped(value);
}

TEST(JsonStream, MembersPutTheStreamedKeyWhereItSorts) {
  const json head = {{"b", 1}, {"d", {{"x", 2}}}, {"f", "z"}};
  for (const char* streamed_key : {"a", "c", "e", "g", "d"}) {
    std::string text;
    JsonStream out([&](std::string_view piece) { text += piece; });
    out.begin_object();
    out.members(head, streamed_key, [&] {
      out.begin_array();
      out.value({{"k", 1}});
      out.value(json::array());
      out.end_array();
    });
    out.end_object();
    out.finish();
    json whole = head;
    whole[streamed_key] = {{{"k", 1}}, json::array()};
    EXPECT_EQ(text, dumped(whole)) << streamed_key;
  }
}

// A big document reaches the sink in several pieces, each of them whole JSON text: filtering the pieces one by one
// (as `trainscope report` does with printable_json) prints what filtering the whole text prints.
TEST(JsonStream, PiecesCanBeFilteredOneByOne) {
  json big = json::array();
  for (int i = 0; i < 5000; ++i) big.push_back({{"i", i}, {"host", "node\x7f\xc2\x85\xff-" + std::to_string(i)}});
  std::vector<std::string> pieces;
  const std::string text = streamed(big, 1, &pieces);
  EXPECT_EQ(text, dumped(big));
  ASSERT_GT(pieces.size(), 2u);
  std::string filtered;
  for (const std::string& piece : pieces) filtered += printable_json(piece);
  EXPECT_EQ(filtered, printable_json(dumped(big)));
  EXPECT_EQ(json::parse(filtered).size(), 5000u);
}

}  // namespace
}  // namespace trainscope::reports
