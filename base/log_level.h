// The levels of trainscope's log and their names, once for every layer: TRAINSCOPE_LOG_LEVEL parses into it
// (shim/config.h), the exchange's client and coordinator hand their lines on with it
// (collectors/exchange/wire_protocol.h: LogSink), and the engine's spdlog logger maps it once
// (shim/engine/engine_logging.cc).
#pragma once

#include <cstdint>

namespace trainscope {

enum class LogLevel : uint8_t { kTrace = 0, kDebug, kInfo, kWarn, kError, kCritical, kOff };

// TRAINSCOPE_LOG_LEVEL's spelling of each level: "trace", "debug", "info", "warn", "error", "critical", "off" (the
// configuration prints it, the shim's stderr lines and the command's say it).
constexpr const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
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
