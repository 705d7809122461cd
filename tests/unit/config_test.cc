// Checks the TRAINSCOPE_* parser: defaults, every accepted and rejected form, error text, escaping, typo hints.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shim/config.h"

namespace trainscope {
namespace {

// An environ-style array that owns its strings.
class Env {
 public:
  Env(std::initializer_list<std::string> entries) : entries_(entries) {}
  // Rebuilt on every call: a copied or moved Env must not point into its source's strings.
  char* const* get() {
    pointers_.clear();
    for (std::string& e : entries_) pointers_.push_back(e.data());
    pointers_.push_back(nullptr);
    return pointers_.data();
  }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> pointers_;
};

struct Parsed {
  bool ok;
  std::unique_ptr<Config> config;
  std::string error;
};

Parsed parse(Env env) {
  Parsed p{false, std::make_unique<Config>(), ""};
  char error[512];
  std::memset(error, 'Z', sizeof(error));
  p.ok = parse_config(env.get(), p.config.get(), error, sizeof(error));
  p.error = error;
  return p;
}

Parsed parse_one(const std::string& name, const std::string& value) { return parse(Env{name + "=" + value}); }

std::string accepted(ConfigVar var) { return config_vars()[var].accepted; }

std::string error_for(ConfigVar var, const std::string& shown, const std::string& reason = "") {
  std::string line =
      std::string("trainscope: invalid ") + config_vars()[var].name + "='" + shown + "': accepted " + accepted(var);
  if (!reason.empty()) line += " " + reason;
  return line;
}

std::string value_of(const Config& config, ConfigVar var) {
  std::vector<char> text(kMaxPath + 16);
  EXPECT_TRUE(config_value_text(config, var, text.data(), text.size()));
  return text.data();
}

// ---- table and defaults ----

// The table and the enum are made from one X-list (config_vars.h), so their order cannot differ; what the list can
// still lack is the text a user reads.
TEST(Config, EveryVariableSaysWhatItAcceptsAndWhatItDoes) {
  const ConfigVarInfo* vars = config_vars();
  for (int i = 0; i < kConfigVarCount; ++i) {
    ASSERT_NE(vars[i].default_text, nullptr);
    ASSERT_NE(vars[i].accepted, nullptr);
    ASSERT_NE(vars[i].description, nullptr);
    EXPECT_GT(std::strlen(vars[i].accepted), 0u) << vars[i].name;
    EXPECT_GT(std::strlen(vars[i].description), 0u) << vars[i].name;
  }
}

TEST(Config, Defaults) {
  auto c = std::make_unique<Config>();
  std::memset(c.get(), 0x5a, sizeof(Config));
  config_defaults(c.get());
  EXPECT_TRUE(c->enable);
  EXPECT_STREQ(c->dir, "./trainscope-runs");
  EXPECT_STREQ(c->run_id, "");
  EXPECT_EQ(c->recorder_records, 65536u);
  EXPECT_EQ(c->log_level, LogLevel::kInfo);
  EXPECT_EQ(c->log_ranks_mode, LogRanksMode::kMain);
  EXPECT_EQ(c->log_rank_range_count, 0);
  EXPECT_FALSE(c->launcher_has_rank);
  for (int i = 0; i < kConfigVarCount; ++i) EXPECT_EQ(c->source[i], ValueSource::kDefault);
  // The defaults are config_vars.h's default texts parsed: these are the values the shim had when each was written
  // out by hand, field by field.
  EXPECT_EQ(c->coordinator_mode, CoordinatorMode::kAuto);
  EXPECT_STREQ(c->coordinator_host, "");
  EXPECT_EQ(c->coordinator_port, 0);
  EXPECT_STREQ(c->token, "");
  EXPECT_EQ(c->on_mismatch, VerdictPolicy::kAbort);
  EXPECT_EQ(c->on_desync, VerdictPolicy::kAbort);
  EXPECT_EQ(c->desync_timeout_seconds, 300u);
  EXPECT_EQ(c->watch, WatchMode::kCollectives);
  EXPECT_STREQ(c->watch_kernels, "");
  EXPECT_FALSE(c->watch_modules);
  EXPECT_STREQ(c->watch_modules_regex, "");
  EXPECT_FALSE(c->watch_module_backward);
  EXPECT_EQ(c->watch_every, 1u);
  EXPECT_EQ(c->watch_min_bytes, 0u);
  EXPECT_EQ(c->max_frames, 21u);
  EXPECT_EQ(c->step_marker_form, StepMarkerForm::kAuto);
  EXPECT_STREQ(c->step_marker, "auto");
  EXPECT_EQ(c->on_nonfinite, NonfinitePolicy::kReport);
  EXPECT_EQ(c->overflow_streak, 5u);
  EXPECT_EQ(c->near_overflow, 0.9);
  EXPECT_EQ(c->trace_batch_range_count, 0);
  EXPECT_FALSE(c->abort_after_batch_set);
  EXPECT_EQ(c->abort_after_batch, 0u);
  EXPECT_EQ(c->launches, LaunchesMode::kOn);
  EXPECT_STREQ(c->kernel_dtype, "");
}

TEST(Config, EmptyEnvironmentGivesDefaults) {
  Parsed p = parse(Env{"PATH=/usr/bin", "HOME=/root"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.error, "");
  for (int i = 0; i < kConfigVarCount; ++i) EXPECT_EQ(p.config->source[i], ValueSource::kDefault);
  EXPECT_STREQ(p.config->dir, "./trainscope-runs");

  auto c = std::make_unique<Config>();
  char error[8];
  EXPECT_TRUE(parse_config(nullptr, c.get(), error, sizeof(error)));
  EXPECT_EQ(c->recorder_records, 65536u);
}

TEST(Config, DefaultTextsMatchDefaultsAndParse) {
  auto defaults = std::make_unique<Config>();
  config_defaults(defaults.get());
  for (int i = 0; i < kConfigVarCount; ++i) {
    const ConfigVarInfo& var = config_vars()[i];
    EXPECT_EQ(value_of(*defaults, static_cast<ConfigVar>(i)), var.default_text) << var.name;
    // Their default is "empty", which is not accepted as a set value.
    if (i == kVarRunId || i == kVarToken || i == kVarTraceBatches || i == kVarAbortAfterBatch || i == kVarKernelDtype)
      continue;
    Parsed p = parse_one(var.name, var.default_text);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_EQ(p.config->source[i], ValueSource::kEnvironment);
    EXPECT_EQ(value_of(*p.config, static_cast<ConfigVar>(i)), var.default_text);
  }
}

TEST(Config, SourceMarksOnlySetVariables) {
  Parsed p = parse(Env{"TRAINSCOPE_LOG_LEVEL=debug", "TRAINSCOPE_DIR=/tmp/x"});
  ASSERT_TRUE(p.ok) << p.error;
  for (int i = 0; i < kConfigVarCount; ++i) {
    const bool set = i == kVarLogLevel || i == kVarDir;
    EXPECT_EQ(p.config->source[i], set ? ValueSource::kEnvironment : ValueSource::kDefault) << i;
  }
}

TEST(Config, FirstOccurrenceWinsLikeGetenv) {
  Parsed p = parse(Env{"TRAINSCOPE_LOG_LEVEL=debug", "TRAINSCOPE_LOG_LEVEL=loud"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config->log_level, LogLevel::kDebug);
}

TEST(Config, SimilarNamesAreNotConfused) {
  Parsed p = parse(Env{"TRAINSCOPE_LOG_LEVELX=loud", "XTRAINSCOPE_LOG_LEVEL=loud", "TRAINSCOPE_LOG_LEVEL"});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.config->log_level, LogLevel::kInfo);
}

// ---- TRAINSCOPE_ENABLE ----

TEST(Config, EnableAcceptedForms) {
  const std::pair<const char*, bool> cases[] = {
      {"1", true},    {"0", false},   {"true", true},   {"false", false}, {"yes", true}, {"no", false}, {"on", true},
      {"off", false}, {"TRUE", true}, {"False", false}, {"YES", true},    {"No", false}, {"On", true},  {"OFF", false},
  };
  for (const auto& [text, expected] : cases) {
    Parsed p = parse_one("TRAINSCOPE_ENABLE", text);
    ASSERT_TRUE(p.ok) << text << ": " << p.error;
    EXPECT_EQ(p.config->enable, expected) << text;
    EXPECT_EQ(p.config->source[kVarEnable], ValueSource::kEnvironment);
    EXPECT_EQ(value_of(*p.config, kVarEnable), expected ? "1" : "0");
  }
}

TEST(Config, EnableRejectedForms) {
  for (const char* text :
       {"2", "-1", "01", "tru", "truee", "enable", "enabled", " 1", "1 ", "y", "n", "yes please", "o", "0x1", "null"}) {
    Parsed p = parse_one("TRAINSCOPE_ENABLE", text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_EQ(p.error, error_for(kVarEnable, text)) << text;
  }
}

// ---- TRAINSCOPE_DIR ----

TEST(Config, DirAcceptedForms) {
  for (const std::string& text : std::vector<std::string>{"/tmp/runs", "relative/dir", ".", "/", "with space/and-dash",
                                                          std::string(kMaxPath - 1, 'd')}) {
    Parsed p = parse_one("TRAINSCOPE_DIR", text);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_EQ(std::string(p.config->dir), text);
    EXPECT_EQ(value_of(*p.config, kVarDir), text);
  }
}

TEST(Config, DirRejectedForms) {
  Parsed p = parse_one("TRAINSCOPE_DIR", std::string(kMaxPath, 'd'));
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, error_for(kVarDir, std::string(kMaxShownValue, 'd') + "...", "(too long)"));
  p = parse_one("TRAINSCOPE_DIR", "");
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, error_for(kVarDir, "", "(empty)"));
}

// ---- TRAINSCOPE_RUN_ID ----

TEST(Config, RunIdAcceptedForms) {
  for (const std::string& text :
       std::vector<std::string>{"a", "run-1", "Job_2.step-3", "...", ".hidden", "0", std::string(kMaxRunId, 'r')}) {
    Parsed p = parse_one("TRAINSCOPE_RUN_ID", text);
    ASSERT_TRUE(p.ok) << text << ": " << p.error;
    EXPECT_EQ(std::string(p.config->run_id), text);
    EXPECT_EQ(p.config->source[kVarRunId], ValueSource::kEnvironment);
  }
}

TEST(Config, RunIdRejectedForms) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "(empty)"},
      {".", "(. and .. name no directory of their own)"},
      {"..", "(. and .. name no directory of their own)"},
      {std::string(kMaxRunId + 1, 'r'), "(too long)"},
      {"a/b", "(character outside [A-Za-z0-9._-])"},
      {"../escape", "(character outside [A-Za-z0-9._-])"},
      {"a b", "(character outside [A-Za-z0-9._-])"},
      {"run\n", "(character outside [A-Za-z0-9._-])"},
      {"caf\xc3\xa9", "(character outside [A-Za-z0-9._-])"},
      {"a:b", "(character outside [A-Za-z0-9._-])"},
  };
  for (const auto& [text, reason] : cases) {
    Parsed p = parse_one("TRAINSCOPE_RUN_ID", text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_NE(p.error.find(reason), std::string::npos) << p.error;
    EXPECT_EQ(p.error.rfind("trainscope: invalid TRAINSCOPE_RUN_ID='", 0), 0u) << p.error;
  }
  EXPECT_EQ(parse_one("TRAINSCOPE_RUN_ID", "caf\xc3\xa9").error,
            error_for(kVarRunId, "caf\\xc3\\xa9", "(character outside [A-Za-z0-9._-])"));
}

// ---- TRAINSCOPE_RECORDER_RECORDS ----

TEST(Config, RecorderRecordsAcceptedForms) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"16", 16},     {"65536", 65536}, {"16777216", 16777216}, {"0016", 16},         {"1K", 1024},
      {"64k", 65536}, {"1M", 1048576},  {"16m", 16777216},      {"16384K", 16777216}, {"1000", 1000},
  };
  for (const auto& [text, expected] : cases) {
    Parsed p = parse_one("TRAINSCOPE_RECORDER_RECORDS", text);
    ASSERT_TRUE(p.ok) << text << ": " << p.error;
    EXPECT_EQ(p.config->recorder_records, expected) << text;
    EXPECT_EQ(value_of(*p.config, kVarRecorderRecords), std::to_string(expected));
  }
}

TEST(Config, RecorderRecordsRejectedForms) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "(empty)"},
      {"0", "(out of range)"},
      {"15", "(out of range)"},
      {"16777217", "(out of range)"},
      {"0K", "(out of range)"},
      {"17M", "(out of range)"},
      {"16385K", "(out of range)"},
      {"99999999999999999999999999", "(out of range)"},
      {"18446744073709551616", "(out of range)"},
      {"18446744073709551615K", "(out of range)"},
      {"17592186044416M", "(out of range)"},  // 2^44 * 2^20 wraps to 0 in 64 bits
      {"+16", nullptr},
      {"-16", nullptr},
      {" 16", nullptr},
      {"16 ", nullptr},
      {"16KB", nullptr},
      {"16K1", nullptr},
      {"16KK", nullptr},
      {"K", nullptr},
      {"1.5M", nullptr},
      {"0x10", nullptr},
      {"1e6", nullptr},
      {"16G", nullptr},
      {"sixteen", nullptr},
      {"1,024", nullptr},
  };
  for (const auto& [text, reason] : cases) {
    Parsed p = parse_one("TRAINSCOPE_RECORDER_RECORDS", text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_EQ(p.error, error_for(kVarRecorderRecords, text, reason != nullptr ? reason : "")) << text;
  }
}

// ---- TRAINSCOPE_LOG_LEVEL ----

TEST(Config, LogLevelAcceptedForms) {
  const std::pair<const char*, LogLevel> cases[] = {
      {"trace", LogLevel::kTrace},       {"debug", LogLevel::kDebug},       {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},         {"warning", LogLevel::kWarn},      {"error", LogLevel::kError},
      {"critical", LogLevel::kCritical}, {"off", LogLevel::kOff},           {"TRACE", LogLevel::kTrace},
      {"Debug", LogLevel::kDebug},       {"INFO", LogLevel::kInfo},         {"WARNING", LogLevel::kWarn},
      {"Error", LogLevel::kError},       {"CRITICAL", LogLevel::kCritical}, {"OFF", LogLevel::kOff},
  };
  for (const auto& [text, expected] : cases) {
    Parsed p = parse_one("TRAINSCOPE_LOG_LEVEL", text);
    ASSERT_TRUE(p.ok) << text << ": " << p.error;
    EXPECT_EQ(p.config->log_level, expected) << text;
    EXPECT_EQ(value_of(*p.config, kVarLogLevel), log_level_name(expected));
  }
}

TEST(Config, LogLevelRejectedForms) {
  for (const char* text :
       {"loud", "warn ", " info", "information", "inf", "0", "3", "err", "fatal", "none", "verbose", "debug,info"}) {
    Parsed p = parse_one("TRAINSCOPE_LOG_LEVEL", text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_EQ(p.error, error_for(kVarLogLevel, text)) << text;
  }
  EXPECT_EQ(parse_one("TRAINSCOPE_LOG_LEVEL", "").error, error_for(kVarLogLevel, "", "(empty)"));
}

TEST(Config, ExactErrorLine) {
  EXPECT_EQ(parse_one("TRAINSCOPE_LOG_LEVEL", "loud").error,
            "trainscope: invalid TRAINSCOPE_LOG_LEVEL='loud': accepted "
            "trace|debug|info|warn|warning|error|critical|off");
  EXPECT_EQ(parse_one("TRAINSCOPE_RECORDER_RECORDS", "8").error,
            "trainscope: invalid TRAINSCOPE_RECORDER_RECORDS='8': accepted an integer from 16 to 16777216, "
            "optionally suffixed K (x1024) or M (x1048576) (out of range)");
  EXPECT_EQ(parse_one("TRAINSCOPE_ENABLE", "").error,
            "trainscope: invalid TRAINSCOPE_ENABLE='': accepted 1|0|true|false|yes|no|on|off (empty)");
}

TEST(Config, LogLevelNames) {
  EXPECT_STREQ(log_level_name(LogLevel::kTrace), "trace");
  EXPECT_STREQ(log_level_name(LogLevel::kDebug), "debug");
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "info");
  EXPECT_STREQ(log_level_name(LogLevel::kWarn), "warn");
  EXPECT_STREQ(log_level_name(LogLevel::kError), "error");
  EXPECT_STREQ(log_level_name(LogLevel::kCritical), "critical");
  EXPECT_STREQ(log_level_name(LogLevel::kOff), "off");
}

// ---- TRAINSCOPE_LOG_RANKS ----

TEST(Config, LogRanksMainAndAll) {
  for (const char* text : {"main", "MAIN", "Main"}) {
    Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", text);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_EQ(p.config->log_ranks_mode, LogRanksMode::kMain);
    EXPECT_EQ(value_of(*p.config, kVarLogRanks), "main");
  }
  for (const char* text : {"all", "ALL"}) {
    Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", text);
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_EQ(p.config->log_ranks_mode, LogRanksMode::kAll);
    EXPECT_EQ(value_of(*p.config, kVarLogRanks), "all");
  }
}

TEST(Config, LogRanksList) {
  Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", "0,3,5-7");
  ASSERT_TRUE(p.ok) << p.error;
  ASSERT_EQ(p.config->log_ranks_mode, LogRanksMode::kList);
  ASSERT_EQ(p.config->log_rank_range_count, 3);
  EXPECT_EQ(p.config->log_rank_ranges[0].first, 0);
  EXPECT_EQ(p.config->log_rank_ranges[0].last, 0);
  EXPECT_EQ(p.config->log_rank_ranges[1].first, 3);
  EXPECT_EQ(p.config->log_rank_ranges[1].last, 3);
  EXPECT_EQ(p.config->log_rank_ranges[2].first, 5);
  EXPECT_EQ(p.config->log_rank_ranges[2].last, 7);
  EXPECT_EQ(value_of(*p.config, kVarLogRanks), "0,3,5-7");

  const std::pair<const char*, const char*> canonical[] = {
      {"0", "0"},
      {"16777215", "16777215"},
      {"5-5", "5"},
      {"0-16777215", "0-16777215"},
      {"007,010-012", "7,10-12"},
      {"3,1,3", "3,1,3"},
      {"1-4,2-3", "1-4,2-3"},
  };
  for (const auto& [text, expected] : canonical) {
    Parsed q = parse_one("TRAINSCOPE_LOG_RANKS", text);
    ASSERT_TRUE(q.ok) << text << ": " << q.error;
    EXPECT_EQ(value_of(*q.config, kVarLogRanks), expected);
  }

  std::string most;
  for (int i = 0; i < kMaxLogRankRanges; ++i) most += (i > 0 ? "," : "") + std::to_string(i * 2);
  Parsed q = parse_one("TRAINSCOPE_LOG_RANKS", most);
  ASSERT_TRUE(q.ok) << q.error;
  EXPECT_EQ(q.config->log_rank_range_count, kMaxLogRankRanges);
  EXPECT_EQ(value_of(*q.config, kVarLogRanks), most);
}

TEST(Config, LogRanksRejectedForms) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "(empty)"},
      {"7-5", "(range ends before it starts)"},
      {"16777216", "(rank above 16777215)"},
      {"0-16777216", "(rank above 16777215)"},
      {"99999999999999999999", "(rank above 16777215)"},
      {",", nullptr},
      {"0,", nullptr},
      {",0", nullptr},
      {"0,,1", nullptr},
      {"-1", nullptr},
      {"1-", nullptr},
      {"1--2", nullptr},
      {"1-2-3", nullptr},
      {"a", nullptr},
      {"0 ,1", nullptr},
      {"0, 1", nullptr},
      {" 0", nullptr},
      {"0;1", nullptr},
      {"main,0", nullptr},
      {"0,all", nullptr},
      {"mains", nullptr},
      {"+1", nullptr},
      {"1.5", nullptr},
  };
  for (const auto& [text, reason] : cases) {
    Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_EQ(p.error, error_for(kVarLogRanks, text, reason != nullptr ? reason : "")) << text;
  }

  std::string too_many;
  for (int i = 0; i <= kMaxLogRankRanges; ++i) too_many += (i > 0 ? "," : "") + std::to_string(i);
  Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", too_many);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.error.find("(more than 64 items)"), std::string::npos) << p.error;
}

// ---- error reporting ----

TEST(Config, FirstInvalidVariableInTableOrderIsReported) {
  Parsed p = parse(Env{"TRAINSCOPE_LOG_RANKS=x", "TRAINSCOPE_ENABLE=maybe"});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, error_for(kVarEnable, "maybe"));
}

TEST(Config, ErrorIsTruncatedToItsBuffer) {
  Env env{"TRAINSCOPE_LOG_LEVEL=loud"};
  auto c = std::make_unique<Config>();
  char error[16];
  std::memset(error, 'Z', sizeof(error));
  EXPECT_FALSE(parse_config(env.get(), c.get(), error, 10));
  EXPECT_STREQ(error, "trainscop");
  EXPECT_EQ(error[10], 'Z');  // nothing written past error_len

  char untouched = 'Z';
  EXPECT_FALSE(parse_config(env.get(), c.get(), &untouched, 0));
  EXPECT_EQ(untouched, 'Z');
  EXPECT_FALSE(parse_config(env.get(), c.get(), nullptr, 0));
}

TEST(Config, HostileValuesAreEscapedInErrors) {
  Parsed p = parse_one("TRAINSCOPE_LOG_LEVEL", "\x1b[2J\x1b]0;pwned\x07\r\nquote'back\\\x7f\xff");
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, error_for(kVarLogLevel, "\\x1b[2J\\x1b]0;pwned\\x07\\x0d\\x0aquote\\'back\\\\\\x7f\\xff"));
  for (const char c : p.error) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u >= 0x20 && u < 0x7f) << static_cast<int>(u);
  }
}

TEST(Config, VeryLongValuesAreCutInErrors) {
  const std::string huge(100000, '\x01');
  Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", huge);
  EXPECT_FALSE(p.ok);
  std::string shown;
  for (size_t i = 0; i < kMaxShownValue; ++i) shown += "\\x01";
  EXPECT_EQ(p.error, error_for(kVarLogRanks, shown + "..."));
  EXPECT_LT(p.error.size(), 511u);  // fits the shim's 512-byte buffer whole
}

TEST(Config, EscapeValueNeverSplitsAnEscape) {
  const std::string value =
      "ab\x1b"
      "cd";
  const std::string whole = "ab\\x1bcd";
  for (size_t out_len = 1; out_len < 16; ++out_len) {
    char out[16];
    std::memset(out, 'Z', sizeof(out));
    escape_value(value.data(), value.size(), out, out_len);
    ASSERT_NE(std::memchr(out, '\0', out_len), nullptr) << out_len;
    const std::string got = out;
    if (out_len > whole.size()) {
      EXPECT_EQ(got, whole);
      continue;
    }
    // Cut: whole escapes only, then "..." whenever there is room for it.
    std::string body = got;
    if (out_len - 1 >= 3) {
      ASSERT_GE(got.size(), 3u) << out_len;
      EXPECT_EQ(got.substr(got.size() - 3), "...") << out_len;
      body = got.substr(0, got.size() - 3);
    }
    EXPECT_EQ(whole.compare(0, body.size(), body), 0) << got;
    EXPECT_TRUE(body.size() < 3 || body.size() > 5) << got;  // never inside \x1b
  }
  char out[8];
  escape_value(nullptr, 5, out, sizeof(out));
  EXPECT_STREQ(out, "");
  escape_value("x", 1, nullptr, 0);  // must not crash
}

TEST(Config, EscapeValueWorstCaseFitsDocumentedSize) {
  const std::string value(kMaxShownValue + 10, '\xee');
  char out[kMaxShownValue * 4 + 4];
  escape_value(value.data(), value.size(), out, sizeof(out));
  std::string expected;
  for (size_t i = 0; i < kMaxShownValue; ++i) expected += "\\xee";
  EXPECT_EQ(std::string(out), expected + "...");
}

// ---- unknown names ----

std::vector<std::pair<std::string, std::string>> unknown_in(Env env) {
  std::vector<std::pair<std::string, std::string>> found;
  for_each_unknown_variable(
      env.get(),
      [](const char* name, size_t name_len, const char* suggestion, void* ctx) {
        static_cast<std::vector<std::pair<std::string, std::string>>*>(ctx)->emplace_back(
            std::string(name, name_len), suggestion != nullptr ? suggestion : "");
      },
      &found);
  return found;
}

TEST(Config, UnknownNamesGetTheClosestKnownName) {
  const std::pair<const char*, const char*> cases[] = {
      {"TRAINSCOPE_LOGLEVEL", "TRAINSCOPE_LOG_LEVEL"},
      {"TRAINSCOPE_LOG_LEVLE", "TRAINSCOPE_LOG_LEVEL"},
      {"TRAINSCOPE_LOG_LVL", "TRAINSCOPE_LOG_LEVEL"},
      {"TRAINSCOPE_ENABLED", "TRAINSCOPE_ENABLE"},
      {"TRAINSCOPE_ENALBE", "TRAINSCOPE_ENABLE"},
      {"TRAINSCOPE_DIRS", "TRAINSCOPE_DIR"},
      {"TRAINSCOPE_RUNID", "TRAINSCOPE_RUN_ID"},
      {"TRAINSCOPE_RECORDER_RECORD", "TRAINSCOPE_RECORDER_RECORDS"},
      {"TRAINSCOPE_RECORDERRECORDS", "TRAINSCOPE_RECORDER_RECORDS"},
      {"TRAINSCOPE_LOG_RANK", "TRAINSCOPE_LOG_RANKS"},
      {"TRAINSCOPE_Log_Level", "TRAINSCOPE_LOG_LEVEL"},
      {"trainscope_dir", "TRAINSCOPE_DIR"},
      {"TrainScope_Enable", "TRAINSCOPE_ENABLE"},
  };
  for (const auto& [name, suggestion] : cases) {
    const auto found = unknown_in(Env{std::string(name) + "=1"});
    ASSERT_EQ(found.size(), 1u) << name;
    EXPECT_EQ(found[0].first, name);
    EXPECT_EQ(found[0].second, suggestion) << name;
  }
}

TEST(Config, FarUnknownNamesGetNoSuggestion) {
  for (const std::string& name :
       std::vector<std::string>{"TRAINSCOPE_X", "TRAINSCOPE_FOO", "TRAINSCOPE_", "TRAINSCOPE_COMPLETELY_OTHER",
                                "TRAINSCOPE_LOG", "TRAINSCOPE_" + std::string(1000, 'A')}) {
    const auto found = unknown_in(Env{name + "=1"});
    ASSERT_EQ(found.size(), 1u) << name;
    EXPECT_EQ(found[0].first, name);
    EXPECT_EQ(found[0].second, "") << name;
  }
}

TEST(Config, KnownAndForeignNamesAreNotReported) {
  Env env{"TRAINSCOPE_ENABLE=1",
          "TRAINSCOPE_DIR=/x",
          "TRAINSCOPE_RUN_ID=r",
          "TRAINSCOPE_RECORDER_RECORDS=1K",
          "TRAINSCOPE_LOG_LEVEL=info",
          "TRAINSCOPE_LOG_RANKS=all",
          "NCCL_DEBUG=INFO",
          "TRAINSCOPEX=1",
          "MY_TRAINSCOPE_DIR=1",
          "TRAINSCOP",
          "PATH=/bin"};
  EXPECT_TRUE(unknown_in(std::move(env)).empty());
  for_each_unknown_variable(
      nullptr, [](const char*, size_t, const char*, void*) { FAIL(); }, nullptr);
}

TEST(Config, UnknownNameLengthStopsAtEquals) {
  const auto found = unknown_in(Env{"TRAINSCOPE_LOGLEVEL=debug=x", "TRAINSCOPE_NOVALUE", "TRAINSCOPE_EMPTY="});
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].first, "TRAINSCOPE_LOGLEVEL");
  EXPECT_EQ(found[1].first, "TRAINSCOPE_NOVALUE");
  EXPECT_EQ(found[2].first, "TRAINSCOPE_EMPTY");
}

// ---- who logs to stderr ----

Config config_with_ranks(const std::string& ranks, bool launcher_has_rank) {
  Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", ranks);
  EXPECT_TRUE(p.ok) << p.error;
  Config c = *p.config;
  c.launcher_has_rank = launcher_has_rank;
  return c;
}

TEST(Config, LogsToStderrMain) {
  auto c = std::make_unique<Config>(config_with_ranks("main", false));
  EXPECT_TRUE(config_logs_to_stderr(*c, 0));
  EXPECT_FALSE(config_logs_to_stderr(*c, 1));
  EXPECT_FALSE(config_logs_to_stderr(*c, 7));
  EXPECT_TRUE(config_logs_to_stderr(*c, -1));  // a lone process is the main one
  c->launcher_has_rank = true;
  EXPECT_TRUE(config_logs_to_stderr(*c, 0));
  EXPECT_FALSE(config_logs_to_stderr(*c, -1));  // one of many, rank not known yet
}

TEST(Config, LogsToStderrAll) {
  auto c = std::make_unique<Config>(config_with_ranks("all", true));
  for (int32_t rank : {-1, 0, 1, 5, 16777215}) EXPECT_TRUE(config_logs_to_stderr(*c, rank)) << rank;
  c->launcher_has_rank = false;
  EXPECT_TRUE(config_logs_to_stderr(*c, -1));
}

TEST(Config, LogsToStderrList) {
  auto c = std::make_unique<Config>(config_with_ranks("0,3,5-7", true));
  for (int32_t rank : {0, 3, 5, 6, 7}) EXPECT_TRUE(config_logs_to_stderr(*c, rank)) << rank;
  for (int32_t rank : {-1, 1, 2, 4, 8, 100}) EXPECT_FALSE(config_logs_to_stderr(*c, rank)) << rank;
  c->launcher_has_rank = false;
  EXPECT_TRUE(config_logs_to_stderr(*c, -1));  // counts as rank 0, which is listed
  auto d = std::make_unique<Config>(config_with_ranks("3", false));
  EXPECT_FALSE(config_logs_to_stderr(*d, -1));
  EXPECT_TRUE(config_logs_to_stderr(*d, 3));
}

TEST(Config, LauncherRankIsDetected) {
  const std::pair<const char*, bool> cases[] = {
      {"RANK=3", true},
      {"OMPI_COMM_WORLD_RANK=0", true},
      {"PMIX_RANK=1", true},
      {"PMI_RANK=2", true},
      {"SLURM_PROCID=0", true},
      {"RANK=", false},
      {"RANK=abc", false},
      {"RANK=-1", false},
      {"LOCAL_RANK=0", false},
      {"RANKS=1", false},
      {"RANK=99999999999", false},
  };
  for (const auto& [entry, expected] : cases) {
    Parsed p = parse(Env{entry});
    ASSERT_TRUE(p.ok) << p.error;
    EXPECT_EQ(p.config->launcher_has_rank, expected) << entry;
  }
}

TEST(Config, ValueTextReportsTruncation) {
  Parsed p = parse_one("TRAINSCOPE_LOG_RANKS", "0,3,5-7");
  char small[4];
  EXPECT_FALSE(config_value_text(*p.config, kVarLogRanks, small, sizeof(small)));
  EXPECT_STREQ(small, "0,3");
  EXPECT_FALSE(config_value_text(*p.config, kVarDir, nullptr, 0));
  EXPECT_FALSE(config_value_text(*p.config, kConfigVarCount, small, sizeof(small)));
}

}  // namespace
}  // namespace trainscope

namespace trainscope {
namespace {

// Parses one variable alone and returns the error line ("" on success).
std::string parse_one(const std::string& entry, Config* out) {
  std::string copy = entry;
  char* env[] = {copy.data(), nullptr};
  char error[512];
  return parse_config(env, out, error, sizeof(error)) ? std::string() : std::string(error);
}

TEST(ConfigExchange, DefaultsAreAutoAbortAbortAndFiveMinutes) {
  Config c;
  config_defaults(&c);
  EXPECT_EQ(c.coordinator_mode, CoordinatorMode::kAuto);
  EXPECT_EQ(c.on_mismatch, VerdictPolicy::kAbort);
  EXPECT_EQ(c.on_desync, VerdictPolicy::kAbort);
  EXPECT_EQ(c.desync_timeout_seconds, 300u);
  EXPECT_STREQ(c.token, "");
}

TEST(ConfigExchange, CoordinatorForms) {
  Config c;
  EXPECT_EQ(parse_one("TRAINSCOPE_COORDINATOR=off", &c), "");
  EXPECT_EQ(c.coordinator_mode, CoordinatorMode::kOff);
  EXPECT_EQ(parse_one("TRAINSCOPE_COORDINATOR=node-1.cluster:29400", &c), "");
  EXPECT_EQ(c.coordinator_mode, CoordinatorMode::kAddress);
  EXPECT_STREQ(c.coordinator_host, "node-1.cluster");
  EXPECT_EQ(c.coordinator_port, 29400);
  EXPECT_EQ(parse_one("TRAINSCOPE_COORDINATOR=[fe80::1]:7", &c), "");
  EXPECT_STREQ(c.coordinator_host, "[fe80::1]");
  for (const char* bad : {"node", "node:", ":80", "node:0", "node:65536", "node:80x", "no de:80", "[zz]:80"}) {
    const std::string error = parse_one(std::string("TRAINSCOPE_COORDINATOR=") + bad, &c);
    EXPECT_NE(error.find("trainscope: invalid TRAINSCOPE_COORDINATOR="), std::string::npos) << bad;
    EXPECT_NE(error.find("auto|off|HOST:PORT"), std::string::npos) << bad;
  }
}

TEST(ConfigExchange, TokenPoliciesAndTimeout) {
  Config c;
  EXPECT_EQ(parse_one("TRAINSCOPE_TOKEN=abcdefgh", &c), "");
  EXPECT_STREQ(c.token, "abcdefgh");
  EXPECT_NE(parse_one("TRAINSCOPE_TOKEN=short", &c).find("(too short)"), std::string::npos);
  EXPECT_NE(parse_one("TRAINSCOPE_TOKEN=" + std::string(129, 'a'), &c).find("(too long)"), std::string::npos);
  EXPECT_NE(parse_one("TRAINSCOPE_TOKEN=abc$defgh", &c), "");
  EXPECT_EQ(parse_one("TRAINSCOPE_ON_MISMATCH=warn", &c), "");
  EXPECT_EQ(c.on_mismatch, VerdictPolicy::kWarn);
  EXPECT_EQ(parse_one("TRAINSCOPE_ON_DESYNC=WARN", &c), "");
  EXPECT_EQ(c.on_desync, VerdictPolicy::kWarn);
  EXPECT_NE(parse_one("TRAINSCOPE_ON_DESYNC=ignore", &c).find("accepted abort|warn"), std::string::npos);
  EXPECT_EQ(parse_one("TRAINSCOPE_DESYNC_TIMEOUT=90", &c), "");
  EXPECT_EQ(c.desync_timeout_seconds, 90u);
  EXPECT_EQ(parse_one("TRAINSCOPE_DESYNC_TIMEOUT=10m", &c), "");
  EXPECT_EQ(c.desync_timeout_seconds, 600u);
  EXPECT_EQ(parse_one("TRAINSCOPE_DESYNC_TIMEOUT=2h", &c), "");
  EXPECT_EQ(c.desync_timeout_seconds, 7200u);
  for (const char* bad : {"0", "-5", "5d", "1.5", "169h", "99999999999999999999"})
    EXPECT_NE(parse_one(std::string("TRAINSCOPE_DESYNC_TIMEOUT=") + bad, &c), "") << bad;
}

TEST(ConfigExchange, TokenIsNeverPrinted) {
  Config c;
  ASSERT_EQ(parse_one("TRAINSCOPE_TOKEN=supersecret", &c), "");
  char text[64];
  ASSERT_TRUE(config_value_text(c, kVarToken, text, sizeof(text)));
  EXPECT_STREQ(text, "(set)");
}

// ---- frames (issue 5) ----

std::string text_of(const Config& c, ConfigVar var) {
  char text[512];
  EXPECT_TRUE(config_value_text(c, var, text, sizeof(text)));
  return text;
}

TEST(ConfigFrames, DefaultsWatchCollectivesAndReportOnly) {
  Config c;
  config_defaults(&c);
  EXPECT_EQ(c.watch, WatchMode::kCollectives);
  EXPECT_EQ(c.watch_every, 1u);
  EXPECT_EQ(c.watch_min_bytes, 0u);
  EXPECT_EQ(c.max_frames, 21u);
  EXPECT_EQ(c.step_marker_form, StepMarkerForm::kAuto);
  EXPECT_EQ(c.on_nonfinite, NonfinitePolicy::kReport);
  EXPECT_EQ(c.overflow_streak, 5u);
  EXPECT_DOUBLE_EQ(c.near_overflow, 0.9);
  EXPECT_EQ(c.trace_batch_range_count, 0);
  EXPECT_FALSE(c.abort_after_batch_set);
}

TEST(ConfigFrames, AcceptedForms) {
  Config c;
  EXPECT_EQ(parse_one("TRAINSCOPE_WATCH=off", &c), "");
  EXPECT_EQ(c.watch, WatchMode::kOff);
  EXPECT_EQ(parse_one("TRAINSCOPE_WATCH_EVERY=16", &c), "");
  EXPECT_EQ(c.watch_every, 16u);
  EXPECT_EQ(parse_one("TRAINSCOPE_WATCH_MIN_BYTES=4K", &c), "");
  EXPECT_EQ(c.watch_min_bytes, 4096u);
  EXPECT_EQ(parse_one("TRAINSCOPE_WATCH_MIN_BYTES=2g", &c), "");
  EXPECT_EQ(c.watch_min_bytes, uint64_t{2} << 30);
  EXPECT_EQ(parse_one("TRAINSCOPE_MAX_FRAMES=5", &c), "");
  EXPECT_EQ(c.max_frames, 5u);
  EXPECT_EQ(parse_one("TRAINSCOPE_STEP_MARKER=nvtx:^train_step$", &c), "");
  EXPECT_EQ(c.step_marker_form, StepMarkerForm::kNvtx);
  EXPECT_STREQ(c.step_marker, "nvtx:^train_step$");
  EXPECT_EQ(parse_one("TRAINSCOPE_STEP_MARKER=collective:AllGather|ReduceScatter", &c), "");
  EXPECT_EQ(c.step_marker_form, StepMarkerForm::kCollective);
  EXPECT_EQ(parse_one("TRAINSCOPE_STEP_MARKER=every:12", &c), "");
  EXPECT_EQ(c.step_marker_form, StepMarkerForm::kEvery);
  EXPECT_EQ(parse_one("TRAINSCOPE_ON_NONFINITE=abort", &c), "");
  EXPECT_EQ(c.on_nonfinite, NonfinitePolicy::kAbort);
  EXPECT_EQ(parse_one("TRAINSCOPE_OVERFLOW_STREAK=0", &c), "");
  EXPECT_EQ(c.overflow_streak, 0u);
  EXPECT_EQ(parse_one("TRAINSCOPE_NEAR_OVERFLOW=.95", &c), "");
  EXPECT_DOUBLE_EQ(c.near_overflow, 0.95);
  EXPECT_EQ(text_of(c, kVarNearOverflow), "0.95");
  EXPECT_EQ(parse_one("TRAINSCOPE_NEAR_OVERFLOW=1", &c), "");
  EXPECT_DOUBLE_EQ(c.near_overflow, 1.0);
  EXPECT_EQ(parse_one("TRAINSCOPE_TRACE_BATCHES=1,3,10-12", &c), "");
  EXPECT_EQ(text_of(c, kVarTraceBatches), "1,3,10-12");
  EXPECT_TRUE(config_traces_batch(c, 11));
  EXPECT_FALSE(config_traces_batch(c, 2));
  EXPECT_EQ(parse_one("TRAINSCOPE_ABORT_AFTER_BATCH=0", &c), "");
  EXPECT_TRUE(c.abort_after_batch_set);
  EXPECT_EQ(text_of(c, kVarAbortAfterBatch), "0");
}

// A value refused with one line naming the variable and containing `expected` (the accepted forms, or why).
struct Bad {
  const char* assignment;
  const char* expected;  // part of the one-line error
};
void expect_refused(const char* assignment, const char* expected) {
  Config c;
  const std::string error = parse_one(assignment, &c);
  const std::string name(assignment, std::strchr(assignment, '=') - assignment);
  EXPECT_NE(error.find("trainscope: invalid " + name + "="), std::string::npos) << assignment << ": " << error;
  EXPECT_NE(error.find(expected), std::string::npos) << assignment << ": " << error;
}

TEST(ConfigFrames, BadValuesNameTheVariableAndTheAcceptedForms) {
  const Bad bad[] = {
      {"TRAINSCOPE_WATCH=all",
       "accepted off, or a comma-separated list of collectives, modules, modules:REGEX, backward (with modules) and "
       "kernels:REGEX"},
      {"TRAINSCOPE_WATCH_EVERY=0", "(out of range)"},
      {"TRAINSCOPE_WATCH_EVERY=3x", "an integer from 1 to 1000000000"},
      {"TRAINSCOPE_WATCH_MIN_BYTES=1T", "suffixed K, M or G"},
      {"TRAINSCOPE_WATCH_MIN_BYTES=1099511627776G", "(out of range)"},  // 2^70 bytes: must not wrap to 0
      {"TRAINSCOPE_RECORDER_RECORDS=17592186044416M", "(out of range)"},
      {"TRAINSCOPE_MAX_FRAMES=0", "(out of range)"},
      {"TRAINSCOPE_STEP_MARKER=nvtx:", "(the regular expression after the colon is empty)"},
      {"TRAINSCOPE_STEP_MARKER=nvtx:step(", "(invalid POSIX extended regular expression:"},
      {"TRAINSCOPE_STEP_MARKER=every:0", "every: takes a whole number"},
      {"TRAINSCOPE_STEP_MARKER=steps", "auto|nvtx:REGEX|collective:REGEX|every:N"},
      {"TRAINSCOPE_ON_NONFINITE=ignore", "accepted report|abort"},
      {"TRAINSCOPE_OVERFLOW_STREAK=-1", "an integer from 0 to 1000000"},
      {"TRAINSCOPE_NEAR_OVERFLOW=1.5", "(above 1)"},
      {"TRAINSCOPE_NEAR_OVERFLOW=0,9", "a fraction from 0 to 1"},
      {"TRAINSCOPE_NEAR_OVERFLOW=90%", "a fraction from 0 to 1"},
      {"TRAINSCOPE_TRACE_BATCHES=3-1", "(range ends before it starts)"},
      {"TRAINSCOPE_TRACE_BATCHES=1,,2", "batch numbers and inclusive ranges"},
      {"TRAINSCOPE_TRACE_BATCHES=", "(empty)"},
      {"TRAINSCOPE_ABORT_AFTER_BATCH=-2", "a batch number from 0"},
  };
  for (const Bad& b : bad) expect_refused(b.assignment, b.expected);
}

// ---- launches (issue 12) ----

TEST(ConfigLaunches, DefaultsRecordLaunchesAndWatchNoKernel) {
  Config c;
  config_defaults(&c);
  EXPECT_EQ(c.launches, LaunchesMode::kOn);
  EXPECT_STREQ(c.watch_kernels, "");
  EXPECT_STREQ(c.kernel_dtype, "");
  EXPECT_EQ(text_of(c, kVarLaunches), "on");
  EXPECT_EQ(text_of(c, kVarKernelDtype), "");
  EXPECT_TRUE(config_watches_anything(c));
}

TEST(ConfigLaunches, LaunchesModes) {
  Config c;
  EXPECT_EQ(parse_one("TRAINSCOPE_LAUNCHES=calls", &c), "");
  EXPECT_EQ(c.launches, LaunchesMode::kCalls);
  EXPECT_EQ(text_of(c, kVarLaunches), "calls");
  EXPECT_EQ(parse_one("TRAINSCOPE_LAUNCHES=OFF", &c), "");
  EXPECT_EQ(c.launches, LaunchesMode::kOff);
  EXPECT_EQ(text_of(c, kVarLaunches), "off");
  EXPECT_EQ(parse_one("TRAINSCOPE_LAUNCHES=on", &c), "");
  EXPECT_EQ(c.launches, LaunchesMode::kOn);
}

TEST(ConfigLaunches, WatchKernelsAloneOrWithCollectives) {
  Config c;
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=kernels:gemm|elementwise", &c), "");
  EXPECT_EQ(c.watch, WatchMode::kOff);
  EXPECT_STREQ(c.watch_kernels, "gemm|elementwise");
  EXPECT_TRUE(config_watches_anything(c));
  EXPECT_EQ(text_of(c, kVarWatch), "kernels:gemm|elementwise");

  // The regex runs to the end of the value: its commas and colons are its own.
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=collectives,kernels:^(add|mul)_kernel<float, ?4>:x$", &c), "");
  EXPECT_EQ(c.watch, WatchMode::kCollectives);
  EXPECT_STREQ(c.watch_kernels, "^(add|mul)_kernel<float, ?4>:x$");
  EXPECT_EQ(text_of(c, kVarWatch), "collectives,kernels:^(add|mul)_kernel<float, ?4>:x$");

  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=Collectives", &c), "");
  EXPECT_EQ(c.watch, WatchMode::kCollectives);
  EXPECT_STREQ(c.watch_kernels, "");
  EXPECT_EQ(text_of(c, kVarWatch), "collectives");

  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=off", &c), "");
  EXPECT_FALSE(config_watches_anything(c));
  EXPECT_EQ(text_of(c, kVarWatch), "off");
}

TEST(ConfigFrames, WatchModulesAloneWithARegexOrBesideCollectivesAndKernels) {
  Config c;
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=modules", &c), "");
  EXPECT_TRUE(c.watch_modules);
  EXPECT_STREQ(c.watch_modules_regex, "");
  EXPECT_EQ(c.watch, WatchMode::kOff);
  EXPECT_TRUE(config_watches_anything(c));
  EXPECT_EQ(text_of(c, kVarWatch), "modules");

  // Any order; the item with a regex comes last, and its commas are its own.
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=modules,collectives,kernels:gemm,elementwise", &c), "");
  EXPECT_TRUE(c.watch_modules);
  EXPECT_EQ(c.watch, WatchMode::kCollectives);
  EXPECT_STREQ(c.watch_kernels, "gemm,elementwise");
  EXPECT_EQ(text_of(c, kVarWatch), "collectives,modules,kernels:gemm,elementwise");

  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=collectives,modules:DenseReluDense|^decoder\\.block\\.1", &c), "");
  EXPECT_TRUE(c.watch_modules);
  EXPECT_STREQ(c.watch_modules_regex, "DenseReluDense|^decoder\\.block\\.1");
  EXPECT_STREQ(c.watch_kernels, "");
  EXPECT_EQ(text_of(c, kVarWatch), "collectives,modules:DenseReluDense|^decoder\\.block\\.1");

  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=collectives", &c), "");
  EXPECT_FALSE(c.watch_modules);
  EXPECT_FALSE(c.watch_module_backward);
  EXPECT_STREQ(c.watch_modules_regex, "");
}

TEST(ConfigFrames, WatchBackwardAddsTheModulesGradients) {
  Config c;
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=backward,modules", &c), "");
  EXPECT_TRUE(c.watch_modules);
  EXPECT_TRUE(c.watch_module_backward);
  EXPECT_EQ(text_of(c, kVarWatch), "modules,backward");
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=collectives,backward,modules:wo$", &c), "");
  EXPECT_TRUE(c.watch_module_backward);
  EXPECT_STREQ(c.watch_modules_regex, "wo$");
  EXPECT_EQ(text_of(c, kVarWatch), "collectives,backward,modules:wo$");
  ASSERT_EQ(parse_one("TRAINSCOPE_WATCH=modules", &c), "");
  EXPECT_FALSE(c.watch_module_backward);
}

TEST(ConfigLaunches, KernelDtypeTakesTheStatisticsNames) {
  Config c;
  for (const char* name : {"float64", "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "int8", "uint8",
                           "int32", "uint32", "int64", "uint64"}) {
    ASSERT_EQ(parse_one(std::string("TRAINSCOPE_KERNEL_DTYPE=") + name, &c), "") << name;
    EXPECT_STREQ(c.kernel_dtype, name);
    EXPECT_EQ(text_of(c, kVarKernelDtype), name);
  }
  ASSERT_EQ(parse_one("TRAINSCOPE_KERNEL_DTYPE=BFloat16", &c), "");
  EXPECT_STREQ(c.kernel_dtype, "bfloat16");  // canonical, whatever the case given
}

TEST(ConfigLaunches, BadValuesNameTheVariableAndTheAcceptedForms) {
  const Bad bad[] = {
      {"TRAINSCOPE_LAUNCHES=yes", "accepted on|calls|off"},
      {"TRAINSCOPE_WATCH=kernels:", "(the regular expression after kernels: is empty)"},
      {"TRAINSCOPE_WATCH=collectives,kernels:", "(the regular expression after kernels: is empty)"},
      {"TRAINSCOPE_WATCH=kernels:gemm(", "(invalid POSIX extended regular expression:"},
      {"TRAINSCOPE_WATCH=kernels,collectives", "a comma-separated list of collectives, modules, modules:REGEX"},
      {"TRAINSCOPE_WATCH=modules:", "(the regular expression after modules: is empty)"},
      {"TRAINSCOPE_WATCH=collectives,modules:wo(", "(invalid POSIX extended regular expression:"},
      {"TRAINSCOPE_WATCH=modules,,collectives", "(an empty item)"},
      {"TRAINSCOPE_WATCH=backward", "(backward is for module frames: give it with modules or modules:REGEX)"},
      {"TRAINSCOPE_WATCH=collectives,backward", "(backward is for module frames"},
      {"TRAINSCOPE_WATCH=kernels:gemm,collectives:x(", "(invalid POSIX extended regular expression:"},
      {"TRAINSCOPE_KERNEL_DTYPE=fp16", "accepted float64|float32|float16|bfloat16|float8_e4m3|float8_e5m2|int8"},
      {"TRAINSCOPE_KERNEL_DTYPE=", "(empty)"},
  };
  for (const Bad& b : bad) expect_refused(b.assignment, b.expected);
  // A regex too long for the configuration is refused, not cut.
  Config c;
  const std::string error = parse_one("TRAINSCOPE_WATCH=kernels:" + std::string(kMaxWatchKernels + 1, 'a'), &c);
  EXPECT_NE(error.find("(regular expression too long)"), std::string::npos) << error;
}

// TRAINSCOPE_THREAD_CLASS: idle by default (the bulk threads use the cores the job leaves idle), normal on request;
// anything else is refused with the two accepted forms.
TEST(ConfigThreadClass, IdleByDefaultNormalOnRequestAndNothingElse) {
  Config c;
  config_defaults(&c);
  EXPECT_EQ(c.thread_class, ThreadClass::kIdle);
  EXPECT_EQ(text_of(c, kVarThreadClass), "idle");
  ASSERT_EQ(parse_one("TRAINSCOPE_THREAD_CLASS=Normal", &c), "");
  EXPECT_EQ(c.thread_class, ThreadClass::kNormal);
  EXPECT_EQ(text_of(c, kVarThreadClass), "normal");
  ASSERT_EQ(parse_one("TRAINSCOPE_THREAD_CLASS=idle", &c), "");
  EXPECT_EQ(c.thread_class, ThreadClass::kIdle);
  expect_refused("TRAINSCOPE_THREAD_CLASS=batch", "accepted idle|normal");
  expect_refused("TRAINSCOPE_THREAD_CLASS=", "accepted idle|normal");
}

}  // namespace
}  // namespace trainscope
