// The levels of trainscope's log, one enum for every layer: TRAINSCOPE_LOG_LEVEL parses into it (shim/config.h), the
// exchange's client and coordinator hand their lines on with it (collectors/exchange/wire_protocol.h: LogSink), and the
// engine's spdlog logger maps it once (shim/engine/engine_logging.cc).
#pragma once

#include <cstdint>

namespace trainscope {

enum class LogLevel : uint8_t { kTrace = 0, kDebug, kInfo, kWarn, kError, kCritical, kOff };

// "trace", "debug", "info", "warning", "error", "critical", "off": as the command prints a line's level.
constexpr const char* log_level_word(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kCritical:
      return "critical";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

}  // namespace trainscope
