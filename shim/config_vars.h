// The TRAINSCOPE_* variables, as one X-macro list: the one place a variable is written (see config.h).
//
// X(SUFFIX, id, default text, accepted values, parser, printer, description):
//   SUFFIX       the name after TRAINSCOPE_ (TRAINSCOPE_LOG_LEVEL: LOG_LEVEL);
//   id           its ConfigVar, the index in config_vars() and Config::source;
//   default text its value when unset, in the printer's canonical form ("" when unset means "none"); the defaults
//                of Config are this text parsed by the parser (config_defaults), so the two cannot disagree;
//   accepted     the forms accepted, quoted after "accepted" in the error line of an invalid value;
//   parser       bool parser(const char* value, Config* out, const char** reason) in config.cc: false on an invalid
//                value, with `reason` optionally set to a parenthesised detail ("(out of range)");
//   printer      bool printer(const Config&, char* out, size_t out_len, size_t* used) in config.cc: appends the
//                effective value in its canonical form (config_value_text); false when it was truncated;
//   description  one sentence for `trainscope env --json` and docs/configuration.md.
//
// Adding a variable TRAINSCOPE_FOO (the recipe):
//   1. Add its field(s) to Config (config.h) and X(FOO, kVarFoo, ...) here, in the order `trainscope env` shows.
//   2. Define parse_foo and text_foo in config.cc (Choice tables and parse_count cover most values).
//   3. Regenerate docs/configuration.md: build/tools/trainscope env --markdown=docs/configuration.md (a unit test
//      fails while it differs), and add a line to the README's summary table.
// Freestanding: included by the preloaded shim; nothing here allocates.
#pragma once

#define TRAINSCOPE_CONFIG_VARS(X)                                                                                      \
  X(ENABLE, kVarEnable, "1", "1|0|true|false|yes|no|on|off", parse_enable, text_enable,                                \
    "0 makes the shim a pure pass-through that records and changes nothing.")                                          \
  X(DIR, kVarDir, "./trainscope-runs", "a path (non-empty, shorter than 4096 bytes)", parse_dir, text_dir,             \
    "Directory below which one sub-directory per run is created.")                                                     \
  X(RUN_ID, kVarRunId, "", "1-96 characters of [A-Za-z0-9._-], not . or ..", parse_run_id, text_run_id,                \
    "Name of the run's sub-directory; empty derives it from the launcher's job identity (TORCHELASTIC_RUN_ID, "        \
    "SLURM_JOB_ID/SLURM_STEP_ID, MPI job id, MASTER_ADDR/MASTER_PORT).")                                               \
  X(RECORDER_RECORDS, kVarRecorderRecords, "65536",                                                                    \
    "an integer from 16 to 16777216, optionally suffixed K (x1024) or M (x1048576)", parse_recorder_records,           \
    text_recorder_records, "Capacity, in records, of each process's flight recorder ring.")                            \
  X(LOG_LEVEL, kVarLogLevel, "info", "trace|debug|info|warn|warning|error|critical|off", parse_log_level,              \
    text_log_level, "Least severe level of the messages that are logged.")                                             \
  X(LOG_RANKS, kVarLogRanks, "main", "main|all|a list of ranks and inclusive ranges such as 0,3,5-7", parse_log_ranks, \
    text_log_ranks, "Ranks that log to stderr (main is global rank 0); every rank always logs to its own file.")       \
  X(COORDINATOR, kVarCoordinator, "auto", "auto|off|HOST:PORT", parse_coordinator, text_coordinator,                   \
    "Where the exchange's coordinator runs: auto hosts it in global rank 0 at MASTER_ADDR, port MASTER_PORT+3; off "   \
    "records locally only; HOST:PORT joins one started elsewhere (trainscope run, trainscope coordinator).")           \
  X(TOKEN, kVarToken, "", "8-128 characters of [A-Za-z0-9._-]", parse_token, text_token,                               \
    "The job's secret for the exchange; empty derives it from the world communicator's unique id.")                    \
  X(ON_MISMATCH, kVarOnMismatch, "abort", "abort|warn", parse_on_mismatch, text_on_mismatch,                           \
    "abort stops every rank once a collective's shapes disagree (after the report is on disk); warn reports and goes " \
    "on.")                                                                                                             \
  X(ON_DESYNC, kVarOnDesync, "abort", "abort|warn", parse_on_desync, text_on_desync,                                   \
    "What a certain desync (a member left or vanished while others wait) or a vanished rank does.")                    \
  X(DESYNC_TIMEOUT, kVarDesyncTimeout, "300", "seconds from 1 to 604800, optionally suffixed s, m or h",               \
    parse_desync_timeout, text_desync_timeout,                                                                         \
    "A rank alive but silent this long while others wait for it is reported as a warning (and again while stuck).")    \
  X(WATCH, kVarWatch, "collectives",                                                                                   \
    "off, or a comma-separated list of collectives, modules, modules:REGEX, backward (with modules) and "              \
    "kernels:REGEX (REGEX: POSIX extended, to the end of the value: an item with one comes last)",                     \
    parse_watch, text_watch,                                                                                           \
    "collectives computes abs min, abs max and inf/nan counts of each watched collective's send buffer (before the "   \
    "call) and receive buffer (after it) and keeps them as frames; kernels:REGEX does the same for every CUDA kernel " \
    "launch whose demangled name matches (its buffers after the launch); modules makes every torch.nn.Module forward " \
    "of a PyTorch process a frame named like the model (its parameters, inputs and outputs), modules:REGEX those "     \
    "whose qualified name or class matches, and with backward their gradients too (grad_output, grad_input: frames "   \
    "of their own); off watches nothing.")                                                                             \
  X(WATCH_EVERY, kVarWatchEvery, "1", "an integer from 1 to 1000000000", parse_watch_every, text_watch_every,          \
    "Watch every K-th collective of each communicator (sampling); 1 watches them all.")                                \
  X(WATCH_MIN_BYTES, kVarWatchMinBytes, "0",                                                                           \
    "a byte count, optionally suffixed K, M or G (x1024, x1048576, x1073741824)", parse_watch_min_bytes,               \
    text_watch_min_bytes, "Watch only collectives whose buffers hold at least this many bytes.")                       \
  X(MAX_FRAMES, kVarMaxFrames, "21", "an integer from 1 to 100000", parse_max_frames, text_max_frames,                 \
    "Frames (watched calls) of each rank shown in an inf/nan report, the newest last.")                                \
  X(STEP_MARKER, kVarStepMarker, "auto", "auto|nvtx:REGEX|collective:REGEX|every:N (REGEX: POSIX extended)",           \
    parse_step_marker, text_step_marker,                                                                               \
    "Where a training batch starts: auto learns the period of the job's collective sequence; nvtx: an NVTX range "     \
    "push whose name matches; collective: the first call of a matching NCCL function after a non-matching one; "       \
    "every: every N collectives of the first communicator.")                                                           \
  X(ON_NONFINITE, kVarOnNonfinite, "report", "report|abort", parse_on_nonfinite, text_on_nonfinite,                    \
    "report writes the inf/nan report for the first detection and goes on (fp16 loss scaling meets inf on purpose); "  \
    "abort stops the job once the reports are on disk (with a loss scaler: at an inf/nan whose step it did not skip, " \
    "or one it does not get past in TRAINSCOPE_OVERFLOW_STREAK batches).")                                             \
  X(OVERFLOW_STREAK, kVarOverflowStreak, "5", "an integer from 0 to 1000000 (0: off)", parse_overflow_streak,          \
    text_overflow_streak, "Consecutive batches with inf/nan that are reported as a persistent overflow.")              \
  X(NEAR_OVERFLOW, kVarNearOverflow, "0.9", "a fraction from 0 to 1, such as 0.9 (0: off)", parse_near_overflow,       \
    text_near_overflow,                                                                                                \
    "Warn once per frame when a finite abs max reaches this fraction of its type's largest finite value.")             \
  X(TRACE_BATCHES, kVarTraceBatches, "", "batch numbers and inclusive ranges such as 1,3,10-12", parse_trace_batches,  \
    text_trace_batches, "Batches whose frames are all printed and written as they complete (trace mode).")             \
  X(ABORT_AFTER_BATCH, kVarAbortAfterBatch, "", "a batch number from 0 to 281474976710656", parse_abort_after_batch,   \
    text_abort_after_batch, "Stop the job once this batch has ended.")                                                 \
  X(LAUNCHES, kVarLaunches, "on", "on|calls|off", parse_launches, text_launches,                                       \
    "on records every CUDA kernel and graph launch, synchronisation and the first CUDA error (CUPTI callbacks) and "   \
    "learns which launches finished (CUPTI activity); calls records the calls only; off sees no launch.")              \
  X(KERNEL_DTYPE, kVarKernelDtype, "",                                                                                 \
    "float64|float32|float16|bfloat16|float8_e4m3|float8_e5m2|int8|uint8|int32|uint32|int64|uint64",                   \
    parse_kernel_dtype, text_kernel_dtype,                                                                             \
    "Element type of a watched kernel's buffers when its demangled name does not say; empty skips those buffers.")     \
  X(THREAD_CLASS, kVarThreadClass, "idle", "idle|normal", parse_thread_class, text_thread_class,                       \
    "idle runs trainscope's frame thread in the idle scheduling class (SCHED_IDLE), on the cores the job leaves "      \
    "idle, with a guard in the job's class that makes its passes when it falls 250 ms behind; normal runs it in the "  \
    "job's own class. The exchange's threads (its client, the coordinator, ZeroMQ's) always run in the job's class.")
