// Writes one JSON document piece by piece, byte for byte what nlohmann's dump(2, ' ', false, replace) prints for the
// whole document, so that a report of many records never holds them all as JSON.
//
//   JsonStream out(sink);                 // sink(std::string_view): called with whole pieces, 64 KiB and more
//   out.begin_object();
//   out.members(head, "ranks", [&] {      // head's members in key order, "ranks" streamed in at its place
//     out.begin_array();
//     for (...) out.value(small_json);    // each value dumped on the spot, at its depth
//     out.end_array();
//   });
//   out.end_object();
//   out.finish();                          // hands over the rest; the document is complete
//
// nlohmann's objects keep their keys sorted: write an object's keys in that order (members() does), or the text
// differs from the dump of the same document. Every piece handed to the sink is whole JSON text (structure, or
// complete values), never a string cut in two: a filter of the text (reports::printable_json) can run piece by piece.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainscope::reports {

class JsonStream {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit JsonStream(Sink sink);

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Inside an object: the next member's key; its value comes next (value(), begin_object() or begin_array()).
  void key(std::string_view key);
  // A whole value: the document itself, an array's next element, or the value of the key just written.
  void value(const nlohmann::json& value);
  // Inside an object: every member of `object` (a JSON object) in its key order, and the value written by
  // `stream_value` under `streamed_key` where that key sorts among them (a member of `object` by that name is
  // left out).
  void members(const nlohmann::json& object, std::string_view streamed_key, const std::function<void()>& stream_value);
  // Hands what is left to the sink. Call once every container is closed.
  void finish();

 private:
  struct Level {
    bool object = false;
    bool has_members = false;
  };
  void before_value();
  void next_member();  // the separator and indentation before an object's key or an array's element
  void maybe_flush();

  Sink sink_;
  std::string buffer_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

}  // namespace trainscope::reports
