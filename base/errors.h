// trainscope's error conventions: one per world, as STYLE.md asks (NCCL's result codes, Kineto's CUPTI_CALL). Every
// function that can fail follows the one of its layer; what it returns says that it failed, what failed and why,
// as values. No part of trainscope learns of an error by parsing another part's log line back.
//
// 1. The libc world: the preloaded shim, the recorder's writer, base/private_files, anything that can run inside the
//    job's calls or before the engine is loaded. No exceptions, no allocation on the failure path.
//    - An operation on the system returns `int`: 0, else an errno value or one of files::'s refusals (kIsSymlink,
//      kOtherOwner, ...); files::error_text() says it in words. One that yields a descriptor returns it, or the
//      negated error (as the system calls do: files::open_append).
//    - A check of a value (a TRAINSCOPE_* variable) returns bool, and on false sets `const char** reason` to a static
//      phrase saying what is accepted (config.cc's parsers).
//
// 2. The C++ world: the engine, the exchange, the reports, the analysis, the command.
//    - A function that can fail returns bool (or std::optional<T> for a value) and, on failure, sets
//      `std::string* error` (when not null) to a phrase a user can read: what could not be done and why, in that
//      order ("cannot write /runs/x/mismatch-3f2a9c-5.json: No space left on device"). It leaves `*error` alone on
//      success.
//    - Where the caller needs the failure as data (which report, which cause: to note it in a recorder, to list it in
//      a summary), the result carries it typed beside the message: reports::WrittenReport::unwritten, and the
//      coordinator's on_unwritten callback.
//    - Exceptions (std::bad_alloc, a library's) may be thrown inside this world but never leave it: each of the
//      engine's C entry points contains them (shim/engine/engine.cc: counted, the first said in the log, the count
//      said at the end), and the threads' bodies catch theirs.
//
// The two worlds meet at the engine's C ABI (shim/engine_api.h): int results and plain structs, never an exception.
#pragma once
