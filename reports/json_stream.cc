// A JSON document written piece by piece, as nlohmann's pretty dump would print it whole (json_stream.h).
#include "reports/json_stream.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace trainscope::reports {
namespace {

constexpr size_t kIndent = 2;                    // dump(2, ...)
constexpr size_t kFlushBytes = size_t{1} << 16;  // hand the sink pieces of about this size

// What dump(2, ' ', false, replace) prints for `value` when it sits `depth` containers deep in a document: its own
// dump, every line after the first indented by the depth (a dumped string holds no raw newline: it is "\n").
void append_dump(std::string& out, const nlohmann::json& value, size_t depth) {
  const std::string text = value.dump(static_cast<int>(kIndent), ' ', false, nlohmann::json::error_handler_t::replace);
  if (depth == 0 || !value.is_structured()) {
    out += text;
    return;
  }
  size_t from = 0;
  for (size_t newline = text.find('\n'); newline != std::string::npos; newline = text.find('\n', from)) {
    out.append(text, from, newline + 1 - from);
    out.append(depth * kIndent, ' ');
    from = newline + 1;
  }
  out.append(text, from, std::string::npos);
}

}  // namespace

JsonStream::JsonStream(Sink sink) : sink_(std::move(sink)) {}

void JsonStream::next_member() {
  Level& level = levels_.back();
  buffer_ += level.has_members ? ",\n" : "\n";
  buffer_.append(levels_.size() * kIndent, ' ');
  level.has_members = true;
}

void JsonStream::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!levels_.empty()) next_member();  // an array's element
}

void JsonStream::begin_object() {
  before_value();
  buffer_ += '{';
  levels_.push_back({true, false});
}

void JsonStream::begin_array() {
  before_value();
  buffer_ += '[';
  levels_.push_back({false, false});
}

void JsonStream::end_object() {
  const Level level = levels_.back();
  levels_.pop_back();
  if (level.has_members) {
    buffer_ += '\n';
    buffer_.append(levels_.size() * kIndent, ' ');
  }
  buffer_ += '}';
  maybe_flush();
}

void JsonStream::end_array() {
  const Level level = levels_.back();
  levels_.pop_back();
  if (level.has_members) {
    buffer_ += '\n';
    buffer_.append(levels_.size() * kIndent, ' ');
  }
  buffer_ += ']';
  maybe_flush();
}

void JsonStream::key(std::string_view key) {
  next_member();
  append_dump(buffer_, nlohmann::json(std::string(key)), 0);  // escaped as dump escapes a key
  buffer_ += ": ";
  after_key_ = true;
}

void JsonStream::value(const nlohmann::json& value) {
  before_value();
  append_dump(buffer_, value, levels_.size());
  maybe_flush();
}

void JsonStream::members(const nlohmann::json& object, std::string_view streamed_key,
                         const std::function<void()>& stream_value) {
  bool streamed = false;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& name = it.key();
    if (name == streamed_key) continue;
    if (!streamed && name > streamed_key) {
      key(streamed_key);
      stream_value();
      streamed = true;
    }
    key(name);
    value(it.value());
  }
  if (!streamed) {
    key(streamed_key);
    stream_value();
  }
}

void JsonStream::maybe_flush() {
  if (buffer_.size() < kFlushBytes) return;
  sink_(buffer_);
  buffer_.clear();
}

void JsonStream::finish() {
  if (!buffer_.empty()) sink_(buffer_);
  buffer_.clear();
}

}  // namespace trainscope::reports
