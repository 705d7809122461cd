// The run summary says how each process ended: stopped by trainscope (which verdict, which status), exited with a
// status, killed by a signal, still waiting in a call, records unreadable, reports it could not write. Recorders are
// made here with the real writer (and the calls a process makes at its end: record_stop, record_exit_status,
// record_unwritten_report); liveness goes through the report's seam.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_summary.h"
#include "base/flight_record_format.h"
#include "base/flight_recorder_reader.h"
#include "base/flight_recorder_writer.h"
#include "reports/exchange_reports.h"
#include "reports/frame_report.h"
#include "reports/recorder_report.h"
#include "support/text_files.h"
#include "tests/support/rank_recorder.h"
#include "tests/support/subprocess.h"

namespace trainscope::reports {
namespace {

using nlohmann::json;
using recorder::CommEntry;
using recorder::Liveness;
using recorder::Op;
using recorder::Record;
using recorder::StopReason;
using recorder::Writer;

constexpr uint64_t kBase = 1700000000123456789ull;  // 2023-11-14 22:13:20.123456789 UTC
constexpr uint64_t kMs = 1000000;
constexpr uint64_t kEndsComm = 0x3f2a9c0011223344ull;
constexpr int32_t kFirstPid = 3000000;  // rank R has pid kFirstPid + R; no such process runs here

// A run directory "run-7" in a fresh temporary directory, whose recorders are made by the real writer.
class RunFolder {
 public:
  RunFolder() : path_(tmp_.path() + "/run-7") { EXPECT_EQ(mkdir(path_.c_str(), 0700), 0); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Opens rank `rank`'s recorder with one communicator and a returned ncclCommInitRank and all-reduce #1..#calls.
  Writer& rank(int32_t rank, uint64_t calls = 1) {
    Writer& w = writers_[rank];
    const std::string path = file("rank-" + std::to_string(rank) + ".pid-" + std::to_string(pid(rank)) + ".tsrec");
    EXPECT_EQ(testing::open_rank_recorder(w, path.c_str(),
                                          {.rank = rank,
                                           .world = 4,
                                           .pid = pid(rank),
                                           .host = "node-a",
                                           .run_id = "run-7",
                                           .exe = "/usr/bin/train",
                                           .start_ns = kBase,
                                           .max_sites = 4}),
              0);
    testing::add_live_comm(w, kEndsComm, rank, 4, kBase);
    Writer::complete(w.append(call(Op::kCommInitRank, 0, kBase)), 0, kBase + kMs);
    for (uint64_t seq = 1; seq <= calls; ++seq)
      Writer::complete(w.append(call(Op::kAllReduce, seq, kBase + (10 + seq) * kMs)), 0, kBase + (11 + seq) * kMs);
    return w;
  }

  static int32_t pid(int32_t rank) { return kFirstPid + rank; }

  static Record call(Op op, uint64_t seq, uint64_t start_ns, int32_t peer = recorder::kUnknown) {
    Record r{};
    r.start_ns = start_ns;
    r.comm_id = kEndsComm;
    r.seq = seq;
    r.count = 1024;
    r.rank = 0;
    r.nranks = 4;
    r.peer = peer;
    r.redop = recorder::is_collective(op) ? 0 : recorder::kUnknown;
    r.dtype = 7;
    r.op = static_cast<uint16_t>(op);
    return r;
  }

 private:
  testing::TempDir tmp_;
  std::string path_;
  std::map<int32_t, Writer> writers_;
};

// Liveness by pid: `alive` pids run, every other pid is gone.
recorder::ReportOptions liveness(std::vector<int32_t> alive = {}) {
  recorder::ReportOptions options;
  options.liveness = [alive](const recorder::FileHeader& h) {
    for (int32_t pid : alive)
      if (h.pid == pid) return Liveness::kAlive;
    return Liveness::kGone;
  };
  return options;
}

RunSummary summarise(const RunFolder& run, const recorder::ReportOptions& options = liveness(),
                     std::optional<JobEnd> job = std::nullopt) {
  RunSummary summary;
  std::string error;
  EXPECT_TRUE(read_run_summary(run.path(), &summary, &error)) << error;
  recorder::RunDirectory recorders;
  if (recorder::read_run_directory(run.path(), &recorders, &error)) note_recorders(&summary, recorders, options);
  if (job) summary.job = job;
  return summary;
}

JobEnd exited_with(int status, int32_t pid = 1) { return JobEnd{pid, false, status, 0}; }
JobEnd killed_by(int signal, int32_t pid = 1) { return JobEnd{pid, true, 0, signal}; }

constexpr const char* kNothingWrong =
    "  nothing went wrong: no inf/nan, mismatch, desync, vanished rank or crash found\n";

// ---- stopped by trainscope ----------------------------------------------------------------------------------------

TEST(ProcessEnds, RanksStoppedByAMismatchVerdictAreStoppedByTrainscopeNotCrashed) {
  RunFolder run;
  for (int32_t rank = 0; rank < 4; ++rank) {
    Writer& w = run.rank(rank, 4);
    w.append(RunFolder::call(Op::kAllReduce, 5, kBase + 50 * kMs));  // the mismatched call: it never returns
    recorder::record_stop(w.header(), StopReason::kMismatch, 86, kEndsComm, 5, false, 0, false, kBase + 90 * kMs);
    w.abandon();  // _exit(): the writer is never closed
  }
  const RunSummary summary = summarise(run);
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(testing::contains(text, "  stopped: ranks 0\u20133 by trainscope (mismatch, status 86)\n")) << text;
  EXPECT_TRUE(
      testing::contains(text,
                        "  processes: 4 recorded: 4 stopped by trainscope (ranks 0\u20133); calls never returned on "
                        "ranks 0\u20133\n"
                        "    ranks 0\u20133: stopped by trainscope (mismatch, status 86); was waiting in ncclAllReduce "
                        "(communicator 3f2a9c, call #5) since 22:13:20.173456 UTC\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "crashed or killed")) << text;
  EXPECT_FALSE(testing::contains(text, "stopped: none")) << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  // No report on disk (the coordinator wrote it elsewhere): the verdict still makes the mismatch line.
  EXPECT_TRUE(testing::contains(text,
                                "  mismatches: 1 (communicator 3f2a9c call #5; its report is not in this directory; it "
                                "stopped ranks 0\u20133)\n"))
      << text;

  const json j = summary_json(summary);
  EXPECT_FALSE(j["nothing_wrong"].get<bool>());
  ASSERT_EQ(j["processes"]["details"].size(), 4u);
  const json& d = j["processes"]["details"][2];
  EXPECT_EQ(d["rank"], 2);
  EXPECT_EQ(d["state"], "stopped");
  EXPECT_EQ(d["exit_status"], 86);
  EXPECT_EQ(d["stop"]["reason"], "mismatch");
  EXPECT_EQ(d["stop"]["communicator"], recorder::hex_id(kEndsComm));
  EXPECT_EQ(d["stop"]["seq"], 5);
  EXPECT_EQ(d["waiting"]["op"], "ncclAllReduce");
  EXPECT_EQ(d["waiting"]["seq"], 5);
  EXPECT_EQ(j["processes"]["stopped"].size(), 4u);
  EXPECT_EQ(j["processes"]["crashed_or_killed"], json::array());
  EXPECT_EQ(j["stops"].size(), 4u);

  // The recorders' own report says the same, and lists the stops first.
  recorder::RunDirectory recorders;
  std::string error;
  ASSERT_TRUE(recorder::read_run_directory(run.path(), &recorders, &error)) << error;
  const std::string table = recorder::format_text_report(recorders, liveness());
  EXPECT_TRUE(
      testing::contains(table, "  ! rank 1 (pid 3000001, node-a): stopped by trainscope (mismatch, status 86)\n"))
      << table;
  EXPECT_TRUE(testing::contains(table, "| stopped by trainscope (mismatch, status 86) 22:13:20.213456 |")) << table;
  const json rank1 = recorder::make_json_report(recorders, liveness())["ranks"][1];
  EXPECT_EQ(rank1["state"], "stopped");
  EXPECT_EQ(rank1["stopped_by"], "mismatch");
  EXPECT_EQ(rank1["exit_status"], 86);
}

TEST(ProcessEnds, AMismatchReportOnDiskAndTheStoppedRanksAgree) {
  RunFolder run;
  MismatchReport m;
  m.comm_id = kEndsComm;
  m.seq = 5;
  m.op = static_cast<uint16_t>(Op::kAllReduce);
  m.differences = {"count"};
  const WrittenReport written =
      write_report(run.path(), mismatch_base_name(m), format_mismatch_text(m), mismatch_json(m));
  ASSERT_TRUE(written.error.empty()) << written.error;
  for (int32_t rank = 0; rank < 2; ++rank) {
    Writer& w = run.rank(rank, 4);
    recorder::record_stop(w.header(), StopReason::kMismatch, 86, kEndsComm, 5, false, 0, false, kBase + 90 * kMs);
    w.abandon();
  }
  const std::string text = format_summary_text(summarise(run));
  EXPECT_TRUE(testing::contains(text, "  mismatches: 1 (communicator 3f2a9c call #5 `ncclAllReduce`: count differs)\n"))
      << text;
  EXPECT_TRUE(testing::contains(text, "  stopped: ranks 0 and 1 by trainscope (mismatch, status 86)\n")) << text;
  EXPECT_TRUE(
      testing::contains(text,
                        "  processes: 2 recorded: 2 stopped by trainscope (ranks 0 and 1); every call returned\n"
                        "    ranks 0 and 1: stopped by trainscope (mismatch, status 86)\n"))
      << text;
}

TEST(ProcessEnds, EveryWayTrainscopeStopsAProcessIsNamed) {
  struct Case {
    StopReason reason;
    int status;
    bool batch;
    const char* text;
  };
  for (const Case& c :
       {Case{StopReason::kMismatch, 86, false, "stopped by trainscope (mismatch, status 86)"},
        Case{StopReason::kDesync, 86, false, "stopped by trainscope (desync, status 86)"},
        Case{StopReason::kVanishedRank, 86, false, "stopped by trainscope (vanished rank, status 86)"},
        Case{StopReason::kNonfinite, 87, true, "stopped by trainscope (inf/nan abort, status 87)"},
        Case{StopReason::kAbortAfterBatch, 87, true, "stopped by trainscope (abort after batch 5, status 87)"}}) {
    recorder::FileHeader h{};
    recorder::record_stop(&h, c.reason, c.status, 0, 0, c.batch, 5, false, kBase);
    EXPECT_EQ(recorder::stop_text(h), c.text);
    EXPECT_EQ(h.state, static_cast<uint32_t>(recorder::ProcessState::kExited));
    EXPECT_EQ(h.exit_ns, kBase);
  }
}

TEST(ProcessEnds, RanksStoppedOnInfNanWithoutAStopReportOfTheirOwnAreListedBesideTheOneThatHasIt) {
  RunFolder run;
  const json stop = {{"kind", "stop"},
                     {"rank", 1},
                     {"reason", "nonfinite"},
                     {"batch_number", 12},
                     {"message", format_nonfinite_abort(12, "comm 3f2a9c ncclAllReduce #3", "output")}};
  const WrittenReport written = write_report(run.path(), "stop-rank1", stop["message"].get<std::string>(), stop);
  ASSERT_TRUE(written.error.empty()) << written.error;
  for (int32_t rank = 0; rank < 3; ++rank) {
    Writer& w = run.rank(rank, 3);
    recorder::record_stop(w.header(), StopReason::kNonfinite, 87, 0, 0, rank == 1, 12, false, kBase + 90 * kMs);
    w.abandon();
  }
  const std::string text = format_summary_text(summarise(run));
  EXPECT_TRUE(
      testing::contains(text,
                        "  stopped: rank 1 on inf/nan in batch 12 (TRAINSCOPE_ON_NONFINITE=abort); ranks 0 and 2 by "
                        "trainscope (inf/nan abort, status 87)\n"))
      << text;
}

// ---- exit statuses and signals ------------------------------------------------------------------------------------

TEST(ProcessEnds, ExitStatusesAreSaid) {
  RunFolder run;
  Writer& r0 = run.rank(0);
  recorder::record_exit_status(r0.header(), 0);
  r0.close(kBase + 100 * kMs);
  Writer& r1 = run.rank(1);
  recorder::record_exit_status(r1.header(), 3);
  r1.close(kBase + 100 * kMs);
  run.rank(2).close(kBase + 100 * kMs);  // a recorder that says no status (an older trainscope): plainly "exited"
  const RunSummary summary = summarise(run);
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text,
                        "  processes: 3 recorded: 2 exited, 1 exited with status 3 (rank 1); every call returned\n"
                        "    rank 1: exited with status 3\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  EXPECT_EQ(summary_json(summary)["processes"]["details"][1]["exit_status"], 3);
  EXPECT_TRUE(summary_json(summary)["processes"]["details"][2]["exit_status"].is_null());

  // The status is masked as the kernel would: exit(259) exits 3.
  recorder::FileHeader h{};
  recorder::record_exit_status(&h, 259);
  EXPECT_EQ(h.exit_status, 3);
  EXPECT_NE(h.end_flags & recorder::kEndExitStatus, 0u);
}

TEST(ProcessEnds, TheJobsEndNamesTheSignalThatKilledIt) {
  RunFolder run;
  recorder::record_exit_status(run.rank(0).header(), 0);
  const auto job_line = [&](const JobEnd& job) {
    for (const std::string& line : testing::split_lines(format_summary_text(summarise(run, liveness(), job))))
      if (line.starts_with("  job: ")) return line;
    return std::string();
  };
  EXPECT_EQ(job_line(killed_by(SIGKILL)), "  job: killed by SIGKILL");
  EXPECT_EQ(job_line(killed_by(SIGTERM)), "  job: killed by SIGTERM");
  EXPECT_EQ(job_line(exited_with(137)),
            "  job: exited with status 137 (128 + 9: a process was killed by SIGKILL, as launchers and shells report "
            "it)");
  EXPECT_EQ(job_line(exited_with(143)),
            "  job: exited with status 143 (128 + 15: a process was killed by SIGTERM, as launchers and shells "
            "report it)");
  EXPECT_EQ(job_line(exited_with(86)),
            "  job: exited with status 86 (trainscope stopped it: a mismatch, desync or "
            "vanished rank)");
  EXPECT_EQ(job_line(exited_with(0)), "  job: exited with status 0");
  const json j = summary_json(summarise(run, liveness(), killed_by(SIGSEGV)));
  EXPECT_EQ(j["job"]["signal"], SIGSEGV);
  EXPECT_EQ(j["job"]["signal_name"], "SIGSEGV");
  EXPECT_TRUE(j["job"]["exit_status"].is_null());
}

TEST(ProcessEnds, TheJobsOnlyProcessKilledByASignalIsNamedWithIt) {
  RunFolder run;
  Writer& w = run.rank(0, 2);
  w.append(RunFolder::call(Op::kAllReduce, 3, kBase + 50 * kMs));
  w.abandon();  // killed: never closed, pid gone
  const std::string text = format_summary_text(summarise(run, liveness(), killed_by(SIGTERM, RunFolder::pid(0))));
  EXPECT_TRUE(
      testing::contains(text,
                        "    rank 0: killed by SIGTERM; was waiting in ncclAllReduce (communicator 3f2a9c, call #3) "
                        "since 22:13:20.173456 UTC\n"))
      << text;
  // Under a launcher, the job's wait status is the launcher's: a rank gone without a clean exit says only that.
  const std::string launched = format_summary_text(summarise(run, liveness(), exited_with(143)));
  EXPECT_TRUE(testing::contains(launched,
                                "    rank 0: crashed or killed (no clean exit; its process is gone); was waiting in "
                                "ncclAllReduce (communicator 3f2a9c, call #3) since 22:13:20.173456 UTC\n"))
      << launched;
}

// ---- waiting, torn records ----------------------------------------------------------------------------------------

TEST(ProcessEnds, ARankWaitingInACallIsNamedWithItsCall) {
  RunFolder run;
  recorder::record_exit_status(run.rank(0).header(), 0);
  Writer& r1 = run.rank(1, 6);
  r1.append(RunFolder::call(Op::kAllReduce, 7, kBase + 50 * kMs));
  Writer& r2 = run.rank(2);
  r2.append(RunFolder::call(Op::kRecv, 3, kBase + 60 * kMs, 0));
  Writer& r3 = run.rank(3, 6);
  r3.append(RunFolder::call(Op::kAllReduce, 7, kBase + 40 * kMs));
  const RunSummary summary =
      summarise(run, liveness({RunFolder::pid(0), RunFolder::pid(1), RunFolder::pid(2), RunFolder::pid(3)}));
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text,
                        "  processes: 4 recorded: 4 running; calls still pending on ranks 1\u20133\n"
                        "    ranks 1 and 3: running; waiting in ncclAllReduce (communicator 3f2a9c, call #7) since "
                        "22:13:20.163456 UTC\n"
                        "    rank 2: running; waiting in ncclRecv (communicator 3f2a9c, call #3 with peer 0) since "
                        "22:13:20.183456 UTC\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  const json waiting = summary_json(summary)["processes"]["details"][1]["waiting"];
  EXPECT_EQ(waiting["op"], "ncclAllReduce");
  EXPECT_EQ(waiting["communicator"], recorder::hex_id(kEndsComm));
  EXPECT_EQ(waiting["seq"], 7);
  EXPECT_EQ(waiting["since_ns"], kBase + 50 * kMs);
  EXPECT_EQ(waiting["process_gone"], false);
}

// Overwrites every record slot of a closed recorder file with bytes no writer writes.
void tear_every_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  const std::string junk(64 * sizeof(Record), '\xab');
  const off_t ring = static_cast<off_t>(recorder::ring_offset(4, 4));
  ASSERT_EQ(pwrite(fd, junk.data(), junk.size(), ring), static_cast<ssize_t>(junk.size()));
  ::close(fd);
}

TEST(ProcessEnds, ARecorderWhoseRecordsAreAllTornIsUnreadableNeverClean) {
  RunFolder run;
  Writer& r0 = run.rank(0, 4);
  recorder::record_exit_status(r0.header(), 0);
  r0.close(kBase + 100 * kMs);
  Writer& r1 = run.rank(1, 4);
  recorder::record_exit_status(r1.header(), 0);
  r1.close(kBase + 100 * kMs);
  tear_every_record(run.file("rank-1.pid-3000001.tsrec"));
  const RunSummary summary = summarise(run, liveness(), exited_with(0));
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(testing::contains(text,
                                "  processes: 2 recorded: 2 exited; every call returned\n"
                                "    rank 1: exited; records unreadable (all 5 torn)\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  EXPECT_EQ(summary_json(summary)["processes"]["details"][1]["torn_records"], 5);
}

TEST(ProcessEnds, AnUnreadableRecorderFileIsNamedWithWhy) {
  RunFolder run;
  recorder::record_exit_status(run.rank(0).header(), 0);
  {
    const int fd = ::open(run.file("rank-1.pid-3000001.tsrec").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  const std::string text = format_summary_text(summarise(run));
  EXPECT_TRUE(testing::contains(text, "    rank-1.pid-3000001.tsrec: unreadable (empty file (0 bytes): ")) << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
}

// ---- reports that could not be written ----------------------------------------------------------------------------

TEST(ProcessEnds, AVerdictWhoseReportCouldNotBeWrittenIsNeverNone) {
  RunFolder run;
  for (int32_t rank = 0; rank < 2; ++rank) {
    Writer& w = run.rank(rank, 4);
    recorder::record_stop(w.header(), StopReason::kMismatch, 86, kEndsComm, 5, false, 0, /*report_missing=*/true,
                          kBase + 90 * kMs);
    w.abandon();
  }
  RunSummary summary = summarise(run);
  std::string text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text,
                        "  mismatches: 1 (communicator 3f2a9c call #5; its report could not be written; it stopped "
                        "ranks 0 and 1)\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "mismatches: none")) << text;
  EXPECT_TRUE(
      testing::contains(text,
                        "  could not write the report of the verdict that stopped ranks 0 and 1: cause not known (the "
                        "coordinator; its log says why)\n"))
      << text;
  EXPECT_TRUE(summary_json(summary)["mismatches"][0]["report_missing"].get<bool>());

  // `trainscope run` heard its coordinator say why.
  summary.unwritten = {{"mismatch-3f2a9c-5.json", "No space left on device", "the coordinator"}};
  text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text, "  could not write mismatch-3f2a9c-5.json: No space left on device (the coordinator)\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "cause not known")) << text;
}

TEST(ProcessEnds, ReportsARankCouldNotWriteAreNamedWithTheirCause) {
  RunFolder run;
  Writer& r0 = run.rank(0);
  recorder::record_exit_status(r0.header(), 0);
  r0.close(kBase + 100 * kMs);
  Writer& r1 = run.rank(1);
  recorder::record_unwritten_report(r1.header(), "stop-rank1.json", "No space left on device");
  recorder::record_unwritten_report(r1.header(), "stop-rank1.txt", "No space left on device");
  recorder::record_stop(r1.header(), StopReason::kAbortAfterBatch, 87, 0, 0, true, 5, false, kBase + 90 * kMs);
  r1.abandon();
  const RunSummary summary = summarise(run, liveness(), exited_with(87));
  const std::string text = format_summary_text(summary);
  EXPECT_TRUE(
      testing::contains(text, "  could not write stop-rank1.json: No space left on device (rank 1, and 1 more)\n"))
      << text;
  EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << text;
  const json unwritten = summary_json(summary)["unwritten"];
  ASSERT_EQ(unwritten.size(), 1u);
  EXPECT_EQ(unwritten[0]["report"], "stop-rank1.json");
  EXPECT_EQ(unwritten[0]["cause"], "No space left on device");
}

TEST(ProcessEnds, TheNoteOfUnwrittenReportsKeepsTheFirstThatSaysWhy) {
  recorder::FileHeader h{};
  recorder::record_unwritten_report(&h, "manifest.json", "");  // the coordinator's manifest says no why
  EXPECT_STREQ(h.unwritten_report, "manifest.json");
  EXPECT_EQ(h.unwritten_note, recorder::kNoteWithoutCause);
  recorder::record_unwritten_report(&h, "mismatch-3f2a9c-5.json", "No space left on device");
  recorder::record_unwritten_report(&h, "origin.json", "Input/output error");
  EXPECT_STREQ(h.unwritten_report, "mismatch-3f2a9c-5.json");
  EXPECT_STREQ(h.unwritten_cause, "No space left on device");
  EXPECT_EQ(h.unwritten_note, recorder::kNoteWithCause);
  EXPECT_EQ(h.reports_unwritten, 3u);
  EXPECT_NE(h.end_flags & recorder::kEndUnwritten, 0u);
  // Too long a name is cut to the field, still terminated.
  recorder::FileHeader g{};
  recorder::record_unwritten_report(&g, std::string(500, 'x').c_str(), std::string(500, 'y').c_str());
  EXPECT_EQ(std::string(g.unwritten_report), std::string(sizeof(g.unwritten_report) - 1, 'x'));
  EXPECT_EQ(std::string(g.unwritten_cause), std::string(sizeof(g.unwritten_cause) - 1, 'y'));
}

// ---- nothing went wrong -------------------------------------------------------------------------------------------

TEST(ProcessEnds, NothingWentWrongOnlyWhenEveryProcessExitedZeroAndAllIsClean) {
  // The clean run: every rank exited 0, every call returned, every recorder read, the job exited 0.
  const auto clean_run = [](RunFolder& run) {
    for (int32_t rank = 0; rank < 2; ++rank) {
      Writer& w = run.rank(rank, 3);
      recorder::record_exit_status(w.header(), 0);
      w.close(kBase + 100 * kMs);
    }
  };
  {
    RunFolder run;
    clean_run(run);
    const std::string text = format_summary_text(summarise(run, liveness(), exited_with(0)));
    EXPECT_EQ(testing::split_lines(text)[1] + "\n", kNothingWrong) << text;
  }
  // Each of these alone is not clean.
  struct Case {
    const char* name;
    std::optional<JobEnd> job;
    void (*spoil)(RunFolder&);
  };
  const Case cases[] = {
      {"the job exited 1", exited_with(1), [](RunFolder&) {}},
      {"the job was killed", killed_by(SIGKILL), [](RunFolder&) {}},
      {"a rank exited 2", exited_with(0),
       [](RunFolder& run) {
         Writer& w = run.rank(2);
         recorder::record_exit_status(w.header(), 2);
         w.close(kBase + 100 * kMs);
       }},
      {"a rank waits", exited_with(0),
       [](RunFolder& run) {
         Writer& w = run.rank(2);
         w.append(RunFolder::call(Op::kAllReduce, 2, kBase + 50 * kMs));
         w.abandon();
       }},
      {"a rank was stopped by a desync", exited_with(86),
       [](RunFolder& run) {
         Writer& w = run.rank(2);
         recorder::record_stop(w.header(), StopReason::kDesync, 86, kEndsComm, 2, false, 0, false, kBase + 90 * kMs);
         w.abandon();
       }},
      {"a recorder is torn", exited_with(0),
       [](RunFolder& run) {
         Writer& w = run.rank(2, 3);
         recorder::record_exit_status(w.header(), 0);
         w.close(kBase + 100 * kMs);
         tear_every_record(run.file("rank-2.pid-3000002.tsrec"));
       }},
      {"a report could not be written", exited_with(0),
       [](RunFolder& run) {
         Writer& w = run.rank(2);
         recorder::record_unwritten_report(w.header(), "near-overflow-rank2.json", "No space left on device");
         recorder::record_exit_status(w.header(), 0);
         w.close(kBase + 100 * kMs);
       }},
  };
  for (const Case& c : cases) {
    RunFolder run;
    clean_run(run);
    c.spoil(run);
    const std::string text = format_summary_text(summarise(run, liveness(), c.job));
    EXPECT_FALSE(testing::contains(text, "nothing went wrong")) << c.name << ":\n" << text;
    EXPECT_FALSE(summary_json(summarise(run, liveness(), c.job))["nothing_wrong"].get<bool>()) << c.name;
  }
  // A stop the user asked for (TRAINSCOPE_ABORT_AFTER_BATCH) is not something that went wrong, nor is the job's 87.
  {
    RunFolder run;
    for (int32_t rank = 0; rank < 2; ++rank) {
      Writer& w = run.rank(rank, 3);
      // The stop meets rank 1 inside a call: cut short by the stop, not something that went wrong.
      if (rank == 1) w.append(RunFolder::call(Op::kAllReduce, 4, kBase + 50 * kMs));
      recorder::record_stop(w.header(), StopReason::kAbortAfterBatch, 87, 0, 0, true, 5, false, kBase + 90 * kMs);
      w.abandon();
    }
    const std::string text = format_summary_text(summarise(run, liveness(), exited_with(87)));
    EXPECT_TRUE(testing::contains(text, kNothingWrong)) << text;
    EXPECT_TRUE(testing::contains(text, "  stopped: ranks 0 and 1 by trainscope (abort after batch 5, status 87)\n"))
        << text;
    EXPECT_TRUE(testing::contains(text,
                                  "    rank 1: stopped by trainscope (abort after batch 5, status 87); was waiting in "
                                  "ncclAllReduce (communicator 3f2a9c, call #4) since 22:13:20.173456 UTC\n"))
        << text;
  }
}

// ---- the job's end on disk ----------------------------------------------------------------------------------------

TEST(ProcessEnds, TheJobsEndIsReadBackFromTheRunDirectory) {
  RunFolder run;
  recorder::record_exit_status(run.rank(0).header(), 0);
  {
    const std::string content = job_end_json(killed_by(SIGKILL, 4242)).dump(2) + "\n";
    const int fd = ::open(run.file(kJobEndFile).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    ::close(fd);
  }
  RunSummary summary = summarise(run);
  ASSERT_TRUE(summary.job.has_value());
  EXPECT_TRUE(summary.job->signaled);
  EXPECT_EQ(summary.job->signal, SIGKILL);
  EXPECT_EQ(summary.job->pid, 4242);
  EXPECT_TRUE(summary.job_started);
  EXPECT_TRUE(testing::contains(format_summary_text(summary), "  job: killed by SIGKILL\n"))
      << format_summary_text(summary);

  {
    const int fd = ::open(run.file(kJobEndFile).c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "{\"kind\": \"job_exit\"", 19), 19);
    ::close(fd);
  }
  summary = summarise(run);
  EXPECT_FALSE(summary.job.has_value());
  EXPECT_TRUE(testing::contains(format_summary_text(summary), "  could not read: job-exit.json (truncated JSON"))
      << format_summary_text(summary);
}

TEST(ProcessEnds, SignalsAreNamed) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(200), "signal 200");
}

}  // namespace
}  // namespace trainscope::reports
