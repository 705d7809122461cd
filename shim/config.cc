// TRAINSCOPE_* configuration parser (see config.h): freestanding, shared by the preloaded shim and `trainscope env`.
#include "shim/config.h"

#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace trainscope {

namespace {

constexpr char kPrefix[] = "TRAINSCOPE_";
constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;
constexpr int32_t kMaxLogRank = (int32_t{1} << 24) - 1;

// Must match launcher_identity() in identity.cc: the config library cannot depend on the shim's objects.
constexpr const char* kLauncherRankVars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Locale-independent: strcasecmp follows LC_CTYPE, and the job may have set a locale before we parse.
bool equals_ignore_case(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b) {
    if (ascii_lower(*a) != ascii_lower(*b)) return false;
  }
  return *a == *b;
}

const char* find_value(char* const* env, const char* name) {
  if (env == nullptr) return nullptr;
  const size_t len = strlen(name);
  for (char* const* entry = env; *entry != nullptr; ++entry) {
    if (strncmp(*entry, name, len) == 0 && (*entry)[len] == '=') return *entry + len + 1;
  }
  return nullptr;
}

// A launcher that exports its rank variable with garbage in it did not give us a rank (as in identity.cc).
bool is_rank_value(const char* value) {
  if (value == nullptr || *value == '\0') return false;
  uint64_t v = 0;
  for (; *value != '\0'; ++value) {
    if (!is_digit(*value)) return false;
    v = v * 10 + static_cast<uint64_t>(*value - '0');
    if (v > INT32_MAX) return false;
  }
  return true;
}

bool parse_enable(const char* value, Config* out, const char** /*reason*/) {
  static constexpr const char* kOn[] = {"1", "true", "yes", "on"};
  static constexpr const char* kOff[] = {"0", "false", "no", "off"};
  for (const char* word : kOn) {
    if (equals_ignore_case(value, word)) {
      out->enable = true;
      return true;
    }
  }
  for (const char* word : kOff) {
    if (equals_ignore_case(value, word)) {
      out->enable = false;
      return true;
    }
  }
  return false;
}

bool parse_dir(const char* value, Config* out, const char** reason) {
  const size_t len = strlen(value);
  if (len >= kMaxPath) {
    *reason = "(too long)";
    return false;
  }
  memcpy(out->dir, value, len + 1);
  return true;
}

bool parse_run_id(const char* value, Config* out, const char** reason) {
  const size_t len = strlen(value);
  if (len > kMaxRunId) {
    *reason = "(too long)";
    return false;
  }
  if (strcmp(value, ".") == 0 || strcmp(value, "..") == 0) {
    *reason = "(. and .. name no directory of their own)";
    return false;
  }
  for (const char* c = value; *c != '\0'; ++c) {
    const bool ok =
        (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || is_digit(*c) || *c == '.' || *c == '_' || *c == '-';
    if (!ok) {
      *reason = "(character outside [A-Za-z0-9._-])";
      return false;
    }
  }
  memcpy(out->run_id, value, len + 1);
  return true;
}

// A whole number with an optional binary suffix from `suffixes` ("KMG" or ""), at most `max`.
bool parse_count(const char* value, const char* suffixes, uint64_t min, uint64_t max, uint64_t* out,
                 const char** reason) {
  constexpr uint64_t kSaturated = uint64_t{1} << 62;
  const char* p = value;
  if (!is_digit(*p)) return false;
  uint64_t v = 0;
  for (; is_digit(*p); ++p) {
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > kSaturated) v = kSaturated;
  }
  uint64_t multiplier = 1;
  if (*p != '\0') {
    const char* suffix = strchr(suffixes, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    if (suffix == nullptr || *suffix == '\0') return false;
    multiplier = uint64_t{1} << (10 * (1 + (suffix - suffixes)));
    ++p;
  }
  if (*p != '\0') return false;
  // Divided, not multiplied, so a huge number with a suffix cannot wrap around into range.
  if (v > max / multiplier || v * multiplier < min) {
    *reason = "(out of range)";
    return false;
  }
  *out = v * multiplier;
  return true;
}

bool parse_recorder_records(const char* value, Config* out, const char** reason) {
  return parse_count(value, "KM", kMinRecorderRecords, kMaxRecorderRecords, &out->recorder_records, reason);
}

bool parse_log_level(const char* value, Config* out, const char** /*reason*/) {
  struct Name {
    const char* text;
    LogLevel level;
  };
  static constexpr Name kNames[] = {
      {"trace", LogLevel::kTrace},       {"debug", LogLevel::kDebug},  {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},         {"warning", LogLevel::kWarn}, {"error", LogLevel::kError},
      {"critical", LogLevel::kCritical}, {"off", LogLevel::kOff},
  };
  for (const Name& name : kNames) {
    if (equals_ignore_case(value, name.text)) {
      out->log_level = name.level;
      return true;
    }
  }
  return false;
}

// A list of numbers and inclusive ranges, "0,3,5-7", into at most `capacity` ranges of `Range` (first, last), each
// number at most `max`. Shared by TRAINSCOPE_LOG_RANKS and TRAINSCOPE_TRACE_BATCHES.
template <typename Range>
bool parse_range_list(const char* value, uint64_t max, const char* too_big, Range* out, int capacity, int* count,
                      const char** reason) {
  const char* p = value;
  const auto number = [&](uint64_t* v) {
    if (!is_digit(*p)) return false;
    *v = 0;
    for (; is_digit(*p); ++p) {
      *v = *v * 10 + static_cast<uint64_t>(*p - '0');
      if (*v > max) *v = max + 1;  // saturates: a huge number reads as too big, never wraps into range
    }
    return true;
  };
  int n = 0;
  for (;;) {
    uint64_t first = 0;
    uint64_t last = 0;
    if (!number(&first)) return false;
    last = first;
    if (*p == '-') {
      ++p;
      if (!number(&last)) return false;
    }
    if (first > max || last > max) {
      *reason = too_big;
      return false;
    }
    if (first > last) {
      *reason = "(range ends before it starts)";
      return false;
    }
    if (n == capacity) {
      *reason = "(more than 64 items)";
      return false;
    }
    out[n].first = static_cast<decltype(out[n].first)>(first);
    out[n].last = static_cast<decltype(out[n].last)>(last);
    ++n;
    if (*p == '\0') break;
    if (*p != ',') return false;
    ++p;
  }
  *count = n;
  return true;
}

bool parse_log_ranks(const char* value, Config* out, const char** reason) {
  if (equals_ignore_case(value, "main")) {
    out->log_ranks_mode = LogRanksMode::kMain;
    out->log_rank_range_count = 0;
    return true;
  }
  if (equals_ignore_case(value, "all")) {
    out->log_ranks_mode = LogRanksMode::kAll;
    out->log_rank_range_count = 0;
    return true;
  }
  RankRange ranges[kMaxLogRankRanges];
  int count = 0;
  if (!parse_range_list(value, static_cast<uint64_t>(kMaxLogRank), "(rank above 16777215)", ranges, kMaxLogRankRanges,
                        &count, reason))
    return false;
  out->log_ranks_mode = LogRanksMode::kList;
  out->log_rank_range_count = count;
  memcpy(out->log_rank_ranges, ranges, sizeof(RankRange) * static_cast<size_t>(count));
  return true;
}

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' || c == '-' || c == '_';
}

bool parse_coordinator(const char* value, Config* out, const char** reason) {
  if (equals_ignore_case(value, "auto")) {
    out->coordinator_mode = CoordinatorMode::kAuto;
    return true;
  }
  if (equals_ignore_case(value, "off")) {
    out->coordinator_mode = CoordinatorMode::kOff;
    return true;
  }
  // HOST:PORT, HOST a name or an IPv4 address, or [IPv6]:PORT.
  const char* colon = strrchr(value, ':');
  if (colon == nullptr || colon == value) return false;
  const char* host = value;
  size_t host_len = static_cast<size_t>(colon - value);
  if (host[0] == '[') {
    if (host_len < 3 || host[host_len - 1] != ']') return false;
    for (size_t i = 1; i + 1 < host_len; ++i)
      if (!(is_digit(host[i]) || (ascii_lower(host[i]) >= 'a' && ascii_lower(host[i]) <= 'f') || host[i] == ':'))
        return false;
  } else {
    for (size_t i = 0; i < host_len; ++i)
      if (!is_host_char(host[i])) return false;
  }
  if (host_len > kMaxCoordinatorHost) {
    *reason = "(host too long)";
    return false;
  }
  uint32_t port = 0;
  const char* p = colon + 1;
  if (!is_digit(*p)) return false;
  for (; is_digit(*p) && port <= 65535; ++p) port = port * 10 + static_cast<uint32_t>(*p - '0');
  if (*p != '\0' || port == 0 || port > 65535) {
    *reason = "(port must be 1-65535)";
    return false;
  }
  out->coordinator_mode = CoordinatorMode::kAddress;
  memcpy(out->coordinator_host, host, host_len);
  out->coordinator_host[host_len] = '\0';
  out->coordinator_port = static_cast<uint16_t>(port);
  return true;
}

bool parse_token(const char* value, Config* out, const char** reason) {
  if (!config_token_valid(value, reason)) return false;
  memcpy(out->token, value, strlen(value) + 1);
  return true;
}

// One of a few words (any case), each standing for a value of E.
template <typename E>
struct Choice {
  const char* word;
  E value;
};
template <typename E, size_t N>
bool parse_choice(const char* value, const Choice<E> (&choices)[N], E* out) {
  for (const Choice<E>& choice : choices) {
    if (equals_ignore_case(value, choice.word)) {
      *out = choice.value;
      return true;
    }
  }
  return false;
}

bool parse_policy(const char* value, VerdictPolicy* out) {
  static constexpr Choice<VerdictPolicy> kChoices[] = {{"abort", VerdictPolicy::kAbort},
                                                       {"warn", VerdictPolicy::kWarn}};
  return parse_choice(value, kChoices, out);
}

bool parse_on_mismatch(const char* value, Config* out, const char**) { return parse_policy(value, &out->on_mismatch); }
bool parse_on_desync(const char* value, Config* out, const char**) { return parse_policy(value, &out->on_desync); }

bool parse_desync_timeout(const char* value, Config* out, const char** reason) {
  const char* p = value;
  if (!is_digit(*p)) return false;
  uint64_t v = 0;
  for (; is_digit(*p) && v <= kMaxDesyncTimeoutSeconds; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
  if (is_digit(*p)) {
    *reason = "(out of range)";
    return false;
  }
  uint64_t unit = 1;
  if (*p == 's') {
    ++p;
  } else if (*p == 'm') {
    unit = 60;
    ++p;
  } else if (*p == 'h') {
    unit = 3600;
    ++p;
  }
  if (*p != '\0') return false;
  if (v == 0 || v * unit > kMaxDesyncTimeoutSeconds) {
    *reason = "(out of range)";
    return false;
  }
  out->desync_timeout_seconds = static_cast<uint32_t>(v * unit);
  return true;
}

bool parse_watch_every(const char* value, Config* out, const char** reason) {
  return parse_count(value, "", 1, kMaxWatchEvery, &out->watch_every, reason);
}

bool parse_watch_min_bytes(const char* value, Config* out, const char** reason) {
  return parse_count(value, "KMG", 0, uint64_t{1} << 50, &out->watch_min_bytes, reason);
}

bool parse_max_frames(const char* value, Config* out, const char** reason) {
  uint64_t v = 0;
  if (!parse_count(value, "", 1, kMaxFrames, &v, reason)) return false;
  out->max_frames = static_cast<uint32_t>(v);
  return true;
}

bool starts_with(const char* value, const char* prefix) { return strncmp(value, prefix, strlen(prefix)) == 0; }

// Whether `pattern` compiles as a POSIX extended regex, the syntax the engine matches with; when not, `reason` says
// why in regerror's words.
bool regex_compiles(const char* pattern, const char** reason) {
  regex_t regex;
  const int code = regcomp(&regex, pattern, REG_EXTENDED | REG_NOSUB);
  if (code != 0) {
    static char why[192];  // parsing happens once, at load, on one thread
    char text[128];
    regerror(code, &regex, text, sizeof(text));
    snprintf(why, sizeof(why), "(invalid POSIX extended regular expression: %s)", text);
    *reason = why;
    return false;
  }
  regfree(&regex);
  return true;
}

bool starts_with_ignore_case(const char* value, const char* prefix) {
  for (; *prefix != '\0'; ++value, ++prefix) {
    if (*value == '\0' || ascii_lower(*value) != ascii_lower(*prefix)) return false;
  }
  return true;
}

// off, or a comma-separated list of collectives, modules, modules:REGEX, backward and kernels:REGEX in any order. A
// REGEX runs to the end of the value (it may hold commas), so an item with one comes last. The launch collector and the
// module filter compile them with the same POSIX extended syntax, so a pattern accepted here works there.
bool parse_watch(const char* value, Config* out, const char** reason) {
  static constexpr char kKernels[] = "kernels:";
  static constexpr char kModules[] = "modules:";
  WatchMode collectives = WatchMode::kOff;
  bool modules = false;
  bool backward = false;
  const char* kernel_pattern = nullptr;
  const char* module_pattern = nullptr;
  if (!equals_ignore_case(value, "off")) {
    const char* item = value;
    while (true) {
      const char* comma = strchr(item, ',');
      const size_t len = comma != nullptr ? static_cast<size_t>(comma - item) : strlen(item);
      const auto is = [&](const char* word) { return len == strlen(word) && starts_with_ignore_case(item, word); };
      if (is("collectives")) {
        collectives = WatchMode::kCollectives;
      } else if (is("modules")) {
        modules = true;
      } else if (is("backward")) {
        backward = true;
      } else if (starts_with_ignore_case(item, kKernels) && kernel_pattern == nullptr) {
        kernel_pattern = item + sizeof(kKernels) - 1;
        break;
      } else if (starts_with_ignore_case(item, kModules) && module_pattern == nullptr) {
        modules = true;
        module_pattern = item + sizeof(kModules) - 1;
        break;
      } else {
        if (len == 0) *reason = "(an empty item)";
        return false;
      }
      if (comma == nullptr) break;
      item = comma + 1;
    }
  }
  const auto take = [&](const char* pattern, char* field, const char* empty_reason) {
    if (pattern == nullptr) {
      field[0] = '\0';
      return true;
    }
    const size_t len = strlen(pattern);
    if (len == 0) {
      *reason = empty_reason;
      return false;
    }
    if (len > kMaxWatchKernels) {
      *reason = "(regular expression too long)";
      return false;
    }
    if (!regex_compiles(pattern, reason)) return false;
    memcpy(field, pattern, len + 1);
    return true;
  };
  if (!take(kernel_pattern, out->watch_kernels, "(the regular expression after kernels: is empty)") ||
      !take(module_pattern, out->watch_modules_regex, "(the regular expression after modules: is empty)"))
    return false;
  if (backward && !modules) {
    *reason = "(backward is for module frames: give it with modules or modules:REGEX)";
    return false;
  }
  out->watch = collectives;
  out->watch_modules = modules;
  out->watch_module_backward = backward;
  return true;
}

bool parse_step_marker(const char* value, Config* out, const char** reason) {
  const size_t len = strlen(value);
  if (len > kMaxStepMarker) {
    *reason = "(too long)";
    return false;
  }
  StepMarkerForm form;
  if (strcmp(value, "auto") == 0) {
    form = StepMarkerForm::kAuto;
  } else if (starts_with(value, "nvtx:") || starts_with(value, "collective:")) {
    form = value[0] == 'n' ? StepMarkerForm::kNvtx : StepMarkerForm::kCollective;
    const char* pattern = value + (form == StepMarkerForm::kNvtx ? 5 : 11);
    if (*pattern == '\0') {
      *reason = "(the regular expression after the colon is empty)";
      return false;
    }
    // The engine matches with the same POSIX extended syntax (collectors/frames/batch_tracker.h), so a pattern accepted
    // here is one it can use.
    if (!regex_compiles(pattern, reason)) return false;
  } else if (starts_with(value, "every:")) {
    form = StepMarkerForm::kEvery;
    uint64_t n = 0;
    if (!parse_count(value + 6, "", 1, kMaxWatchEvery, &n, reason)) {
      *reason = "(every: takes a whole number of calls from 1 to 1000000000)";
      return false;
    }
  } else {
    return false;
  }
  out->step_marker_form = form;
  memcpy(out->step_marker, value, len + 1);
  return true;
}

bool parse_on_nonfinite(const char* value, Config* out, const char**) {
  static constexpr Choice<NonfinitePolicy> kChoices[] = {{"report", NonfinitePolicy::kReport},
                                                         {"abort", NonfinitePolicy::kAbort}};
  return parse_choice(value, kChoices, &out->on_nonfinite);
}

bool parse_overflow_streak(const char* value, Config* out, const char** reason) {
  uint64_t v = 0;
  if (!parse_count(value, "", 0, kMaxOverflowStreak, &v, reason)) return false;
  out->overflow_streak = static_cast<uint32_t>(v);
  return true;
}

// A decimal fraction in [0, 1]: digits, an optional point and digits. Parsed by hand: strtod follows the job's
// locale, which may use a decimal comma.
bool parse_near_overflow(const char* value, Config* out, const char** reason) {
  const char* p = value;
  double whole = 0;
  bool digits = false;
  for (; is_digit(*p); ++p, digits = true) whole = whole * 10 + (*p - '0');
  double fraction = 0;
  if (*p == '.') {
    ++p;
    double scale = 0.1;
    for (; is_digit(*p); ++p, digits = true, scale /= 10) fraction += (*p - '0') * scale;
  }
  if (!digits || *p != '\0') return false;
  const double v = whole + fraction;
  if (v > 1.0) {
    *reason = "(above 1)";
    return false;
  }
  out->near_overflow = v;
  return true;
}

bool parse_trace_batches(const char* value, Config* out, const char** reason) {
  BatchRange ranges[kMaxTraceBatchRanges];
  int count = 0;
  if (!parse_range_list(value, kMaxBatchNumber, "(batch number out of range)", ranges, kMaxTraceBatchRanges, &count,
                        reason))
    return false;
  out->trace_batch_range_count = count;
  memcpy(out->trace_batch_ranges, ranges, sizeof(BatchRange) * static_cast<size_t>(count));
  return true;
}

bool parse_abort_after_batch(const char* value, Config* out, const char** reason) {
  if (!parse_count(value, "", 0, kMaxBatchNumber, &out->abort_after_batch, reason)) return false;
  out->abort_after_batch_set = true;
  return true;
}

bool parse_launches(const char* value, Config* out, const char**) {
  static constexpr Choice<LaunchesMode> kChoices[] = {
      {"on", LaunchesMode::kOn}, {"calls", LaunchesMode::kCalls}, {"off", LaunchesMode::kOff}};
  return parse_choice(value, kChoices, &out->launches);
}

// The names of kernels/stats.h's DType (the statistics kernel reads exactly these element types).
constexpr const char* kKernelDtypes[] = {"float64", "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2",
                                         "int8",    "uint8",   "int32",   "uint32",   "int64",       "uint64"};

bool parse_kernel_dtype(const char* value, Config* out, const char**) {
  for (const char* name : kKernelDtypes) {
    if (equals_ignore_case(value, name)) {
      memcpy(out->kernel_dtype, name, strlen(name) + 1);
      return true;
    }
  }
  return false;
}

bool parse_thread_class(const char* value, Config* out, const char**) {
  static constexpr Choice<ThreadClass> kChoices[] = {{"idle", ThreadClass::kIdle}, {"normal", ThreadClass::kNormal}};
  return parse_choice(value, kChoices, &out->thread_class);
}

bool append(char* out, size_t out_len, size_t* used, const char* text) {
  const int n = snprintf(out + *used, out_len - *used, "%s", text);
  if (n < 0 || static_cast<size_t>(n) >= out_len - *used) {
    *used = out_len - 1;
    return false;
  }
  *used += static_cast<size_t>(n);
  return true;
}

bool append_number(char* out, size_t out_len, size_t* used, uint64_t v) {
  char number[24];
  snprintf(number, sizeof(number), "%llu", static_cast<unsigned long long>(v));
  return append(out, out_len, used, number);
}

// A list of ranges as parse_range_list reads it: "0,3,5-7".
template <typename Range>
bool append_ranges(char* out, size_t out_len, size_t* used, const Range* ranges, int count, int capacity) {
  for (int i = 0; i < count && i < capacity; ++i) {
    char item[48];
    const auto first = static_cast<long long>(ranges[i].first);
    const auto last = static_cast<long long>(ranges[i].last);
    if (first == last) {
      snprintf(item, sizeof(item), "%s%lld", i > 0 ? "," : "", first);
    } else {
      snprintf(item, sizeof(item), "%s%lld-%lld", i > 0 ? "," : "", first, last);
    }
    if (!append(out, out_len, used, item)) return false;
  }
  return true;
}

// The printers of config_vars.h: each writes its variable's effective value in the canonical accepted form.
bool text_enable(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.enable ? "1" : "0");
}
bool text_dir(const Config& c, char* out, size_t len, size_t* used) { return append(out, len, used, c.dir); }
bool text_run_id(const Config& c, char* out, size_t len, size_t* used) { return append(out, len, used, c.run_id); }
bool text_recorder_records(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.recorder_records);
}
bool text_log_level(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, log_level_name(c.log_level));
}
bool text_log_ranks(const Config& c, char* out, size_t len, size_t* used) {
  if (c.log_ranks_mode == LogRanksMode::kMain) return append(out, len, used, "main");
  if (c.log_ranks_mode == LogRanksMode::kAll) return append(out, len, used, "all");
  return append_ranges(out, len, used, c.log_rank_ranges, c.log_rank_range_count, kMaxLogRankRanges);
}
bool text_coordinator(const Config& c, char* out, size_t len, size_t* used) {
  if (c.coordinator_mode == CoordinatorMode::kAuto) return append(out, len, used, "auto");
  if (c.coordinator_mode == CoordinatorMode::kOff) return append(out, len, used, "off");
  char port[8];
  snprintf(port, sizeof(port), ":%u", static_cast<unsigned>(c.coordinator_port));
  return append(out, len, used, c.coordinator_host) && append(out, len, used, port);
}
// A secret of the job: say whether it is set, never print it.
bool text_token(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.token[0] != '\0' ? "(set)" : "");
}
bool text_on_mismatch(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.on_mismatch == VerdictPolicy::kAbort ? "abort" : "warn");
}
bool text_on_desync(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.on_desync == VerdictPolicy::kAbort ? "abort" : "warn");
}
bool text_desync_timeout(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.desync_timeout_seconds);
}
// The canonical order: collectives, modules without a regex, then the one item with a regex (a value with both
// regexes cannot be written back in one value; parse_watch never makes one).
bool text_watch(const Config& c, char* out, size_t len, size_t* used) {
  if (!config_watches_anything(c)) return append(out, len, used, "off");
  bool ok = true;
  const char* separator = "";
  const auto item = [&](const char* text) {
    ok = ok && append(out, len, used, separator) && append(out, len, used, text);
    separator = ",";
  };
  if (c.watch != WatchMode::kOff) item("collectives");
  if (c.watch_modules && c.watch_modules_regex[0] == '\0') item("modules");
  if (c.watch_modules && c.watch_module_backward) item("backward");
  if (c.watch_modules_regex[0] != '\0') {
    item("modules:");
    ok = ok && append(out, len, used, c.watch_modules_regex);
  } else if (c.watch_kernels[0] != '\0') {
    item("kernels:");
    ok = ok && append(out, len, used, c.watch_kernels);
  }
  return ok;
}
bool text_watch_every(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.watch_every);
}
bool text_watch_min_bytes(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.watch_min_bytes);
}
bool text_max_frames(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.max_frames);
}
bool text_step_marker(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.step_marker);
}
bool text_on_nonfinite(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.on_nonfinite == NonfinitePolicy::kAbort ? "abort" : "report");
}
bool text_overflow_streak(const Config& c, char* out, size_t len, size_t* used) {
  return append_number(out, len, used, c.overflow_streak);
}
bool text_near_overflow(const Config& c, char* out, size_t len, size_t* used) {
  char number[32];
  snprintf(number, sizeof(number), "%g", c.near_overflow);
  for (char* p = number; *p != '\0'; ++p) {
    if (*p == ',') *p = '.';  // the job's locale may print a decimal comma
  }
  return append(out, len, used, number);
}
bool text_trace_batches(const Config& c, char* out, size_t len, size_t* used) {
  return append_ranges(out, len, used, c.trace_batch_ranges, c.trace_batch_range_count, kMaxTraceBatchRanges);
}
bool text_abort_after_batch(const Config& c, char* out, size_t len, size_t* used) {
  if (!c.abort_after_batch_set) return true;
  return append_number(out, len, used, c.abort_after_batch);
}
bool text_launches(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used,
                c.launches == LaunchesMode::kOn      ? "on"
                : c.launches == LaunchesMode::kCalls ? "calls"
                                                     : "off");
}
bool text_kernel_dtype(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.kernel_dtype);
}
bool text_thread_class(const Config& c, char* out, size_t len, size_t* used) {
  return append(out, len, used, c.thread_class == ThreadClass::kIdle ? "idle" : "normal");
}

// The tables derived from config_vars.h, indexed by ConfigVar. Constant-initialised at compile time, so reading
// them needs no guard and works before any constructor runs.
constexpr ConfigVarInfo kVars[kConfigVarCount] = {
#define TRAINSCOPE_CONFIG_VAR_INFO(suffix, id, default_text, accepted, parser, printer, description) \
  {"TRAINSCOPE_" #suffix, default_text, accepted, description},
    TRAINSCOPE_CONFIG_VARS(TRAINSCOPE_CONFIG_VAR_INFO)
#undef TRAINSCOPE_CONFIG_VAR_INFO
};

using ParseFn = bool (*)(const char* value, Config* out, const char** reason);
constexpr ParseFn kParsers[kConfigVarCount] = {
#define TRAINSCOPE_CONFIG_VAR_PARSER(suffix, id, default_text, accepted, parser, printer, description) parser,
    TRAINSCOPE_CONFIG_VARS(TRAINSCOPE_CONFIG_VAR_PARSER)
#undef TRAINSCOPE_CONFIG_VAR_PARSER
};

using PrintFn = bool (*)(const Config& config, char* out, size_t out_len, size_t* used);
constexpr PrintFn kPrinters[kConfigVarCount] = {
#define TRAINSCOPE_CONFIG_VAR_PRINTER(suffix, id, default_text, accepted, parser, printer, description) printer,
    TRAINSCOPE_CONFIG_VARS(TRAINSCOPE_CONFIG_VAR_PRINTER)
#undef TRAINSCOPE_CONFIG_VAR_PRINTER
};

void write_error(char* error, size_t error_len, const ConfigVarInfo& var, const char* value, const char* reason) {
  if (error == nullptr || error_len == 0) return;
  char shown[kMaxShownValue * 4 + 4];
  escape_value(value, strlen(value), shown, sizeof(shown));
  snprintf(error, error_len, "trainscope: invalid %s='%s': accepted %s%s%s", var.name, shown, var.accepted,
           reason != nullptr ? " " : "", reason != nullptr ? reason : "");
}

// Optimal string alignment distance (edits plus adjacent swaps, the usual typos), ignoring case, over at most
// kMaxCompared characters each: longer names are too far from every known one to be worth a suggestion.
constexpr size_t kMaxCompared = 64;

size_t typo_distance(const char* a, size_t la, const char* b, size_t lb) {
  size_t rows[3][kMaxCompared + 1];
  size_t* before = rows[0];
  size_t* prev = rows[1];
  size_t* cur = rows[2];
  for (size_t j = 0; j <= lb; ++j) prev[j] = j;
  for (size_t i = 1; i <= la; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; ++j) {
      const size_t cost = ascii_lower(a[i - 1]) == ascii_lower(b[j - 1]) ? 0 : 1;
      size_t best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (prev[j - 1] + cost < best) best = prev[j - 1] + cost;
      if (i > 1 && j > 1 && ascii_lower(a[i - 1]) == ascii_lower(b[j - 2]) &&
          ascii_lower(a[i - 2]) == ascii_lower(b[j - 1]) && before[j - 2] + 1 < best) {
        best = before[j - 2] + 1;
      }
      cur[j] = best;
    }
    size_t* recycled = before;
    before = prev;
    prev = cur;
    cur = recycled;
  }
  return prev[lb];
}

const char* closest_known_name(const char* name, size_t name_len) {
  // Compares what follows the prefix, so the shared "TRAINSCOPE_" does not make every short name look close.
  const char* suffix = name + kPrefixLen;
  const size_t suffix_len = name_len - kPrefixLen;
  if (suffix_len == 0 || suffix_len > kMaxCompared) return nullptr;
  const char* best = nullptr;
  size_t best_distance = 0;
  for (const ConfigVarInfo& var : kVars) {
    const char* known = var.name + kPrefixLen;
    const size_t known_len = strlen(known);
    const size_t d = typo_distance(suffix, suffix_len, known, known_len);
    const size_t longer = suffix_len > known_len ? suffix_len : known_len;
    // At most 3 edits, and no more than half the name: "X" is 3 edits from "DIR" but is no typo of it.
    if (d > 3 || 2 * d > longer) continue;
    if (best == nullptr || d < best_distance) {
      best = var.name;
      best_distance = d;
    }
  }
  return best;
}

// Printable ASCII stays as is; quote and backslash get a backslash; everything else becomes \xNN.
size_t escaped_width(unsigned char c) {
  if (c == '\'' || c == '\\') return 2;
  return (c >= 0x20 && c < 0x7f) ? 1 : 4;
}

}  // namespace

const ConfigVarInfo* config_vars() { return kVars; }

void config_defaults(Config* out) {
  // Zero is every enum's first value, an empty string, an empty list and "not set": the defaults of the variables
  // whose default text is empty. The others are their default text, parsed as if it had been set.
  memset(out, 0, sizeof(*out));
  for (int i = 0; i < kConfigVarCount; ++i) {
    const char* reason = nullptr;
    if (kVars[i].default_text[0] != '\0') kParsers[i](kVars[i].default_text, out, &reason);
  }
}

bool config_traces_batch(const Config& config, uint64_t batch) {
  for (int i = 0; i < config.trace_batch_range_count && i < kMaxTraceBatchRanges; ++i) {
    if (batch >= config.trace_batch_ranges[i].first && batch <= config.trace_batch_ranges[i].last) return true;
  }
  return false;
}

bool parse_config(char* const* env, Config* out, char* error, size_t error_len) {
  config_defaults(out);
  if (error != nullptr && error_len > 0) error[0] = '\0';
  for (const char* name : kLauncherRankVars) {
    if (is_rank_value(find_value(env, name))) out->launcher_has_rank = true;
  }
  for (int i = 0; i < kConfigVarCount; ++i) {
    const char* value = find_value(env, kVars[i].name);
    if (value == nullptr) continue;
    const char* reason = nullptr;
    // An empty value is a mistake (a shell variable that expanded to nothing), never a quiet default.
    if (*value == '\0') {
      write_error(error, error_len, kVars[i], value, "(empty)");
      return false;
    }
    if (!kParsers[i](value, out, &reason)) {
      write_error(error, error_len, kVars[i], value, reason);
      return false;
    }
    out->source[i] = ValueSource::kEnvironment;
  }
  return true;
}

void for_each_unknown_variable(char* const* env, UnknownVariableFn fn, void* ctx) {
  if (env == nullptr || fn == nullptr) return;
  for (char* const* entry = env; *entry != nullptr; ++entry) {
    const char* name = *entry;
    // The prefix is matched ignoring case so that trainscope_dir=... earns a warning rather than silence.
    bool prefixed = true;
    for (size_t i = 0; i < kPrefixLen; ++i) {
      if (name[i] == '\0' || ascii_lower(name[i]) != ascii_lower(kPrefix[i])) {
        prefixed = false;
        break;
      }
    }
    if (!prefixed) continue;
    const char* equals = strchr(name, '=');
    const size_t name_len = equals != nullptr ? static_cast<size_t>(equals - name) : strlen(name);
    bool known = false;
    for (const ConfigVarInfo& var : kVars) {
      if (strlen(var.name) == name_len && strncmp(var.name, name, name_len) == 0) {
        known = true;
        break;
      }
    }
    if (!known) fn(name, name_len, closest_known_name(name, name_len), ctx);
  }
}

bool config_logs_to_stderr(const Config& config, int32_t rank) {
  if (rank < 0) {
    // One of many processes that has not learned its rank yet: only "all" can say it logs.
    if (config.launcher_has_rank) return config.log_ranks_mode == LogRanksMode::kAll;
    rank = 0;  // a lone process is the main one
  }
  switch (config.log_ranks_mode) {
    case LogRanksMode::kMain:
      return rank == 0;
    case LogRanksMode::kAll:
      return true;
    case LogRanksMode::kList:
      for (int i = 0; i < config.log_rank_range_count && i < kMaxLogRankRanges; ++i) {
        if (rank >= config.log_rank_ranges[i].first && rank <= config.log_rank_ranges[i].last) return true;
      }
      return false;
  }
  return false;
}

bool config_token_valid(const char* value, const char** reason) {
  const size_t len = strlen(value);
  if (len < kMinToken || len > kMaxToken) {
    *reason = len < kMinToken ? "(too short)" : "(too long)";
    return false;
  }
  for (const char* c = value; *c != '\0'; ++c) {
    if (!is_host_char(*c)) {
      *reason = "(character outside [A-Za-z0-9._-])";
      return false;
    }
  }
  return true;
}

bool config_value_text(const Config& config, ConfigVar var, char* out, size_t out_len) {
  if (out == nullptr || out_len == 0) return false;
  out[0] = '\0';
  if (var < 0 || var >= kConfigVarCount) return false;
  size_t used = 0;
  return kPrinters[var](config, out, out_len, &used);
}

void escape_value(const char* value, size_t len, char* out, size_t out_len) {
  if (out == nullptr || out_len == 0) return;
  out[0] = '\0';
  if (value == nullptr) return;
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t shown = len > kMaxShownValue ? kMaxShownValue : len;
  size_t escaped_len = 0;
  for (size_t i = 0; i < shown; ++i) escaped_len += escaped_width(static_cast<unsigned char>(value[i]));
  // Whatever is cut, by the byte limit or by a small buffer, ends in "..." so a reader knows it is not all.
  const bool cut = len > shown || escaped_len > out_len - 1;
  const size_t limit = cut ? (out_len - 1 >= 3 ? out_len - 1 - 3 : 0) : out_len - 1;
  size_t used = 0;
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    const size_t n = escaped_width(c);
    if (used + n > limit) break;
    if (n == 1) {
      out[used] = static_cast<char>(c);
    } else if (n == 2) {
      out[used] = '\\';
      out[used + 1] = static_cast<char>(c);
    } else {
      out[used] = '\\';
      out[used + 1] = 'x';
      out[used + 2] = kHex[c >> 4];
      out[used + 3] = kHex[c & 0xf];
    }
    used += n;
  }
  if (cut && used + 3 <= out_len - 1) {
    memcpy(out + used, "...", 3);
    used += 3;
  }
  out[used] = '\0';
}

}  // namespace trainscope
