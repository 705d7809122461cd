// The scheduling class of trainscope's bulk threads (TRAINSCOPE_THREAD_CLASS, default idle).
//
// Why idle: a background thread that wakes in the normal class preempts one of the job's ranks, and in a job whose
// ranks wait on each other at every collective the others then wait for that rank. Measured on the whole-job
// benchmark (tests/bench/whole_job.sh, 4 ranks on 2 cores), with the same CPU used by trainscope's threads: the
// defaults cost 1.07-1.11x with the frame thread in the normal class, 1.00-1.04x with it in SCHED_IDLE; SCHED_BATCH
// at nice 19 was 1.09-1.11x, and longer intervals between wakeups changed nothing. An idle-class thread runs only
// where no other thread of the machine wants the core, so it never delays the job.
//
// Which thread: the frame thread, whose work is the bulk of trainscope's CPU (0.4-0.6 us per watched call) and whose
// lateness costs only latency. On a node whose cores are all busy it may not run for seconds (the kernel gives it a
// weight of 3 against 1024 for each busy thread), so:
//   - a guard in the normal class makes its passes when none has ended for 250 ms (shim/engine/engine_frames.cc):
//     frames, reports and an inf/nan's first report are never later than that;
//   - nothing the job's threads wait on is held by it but the pass itself: it sleeps on futexes (base/wake_flag.h),
//     not on a condition variable, and the job's exit waits for it 100 ms at most, then makes the last pass itself.
// Never the exchange's threads: the client sends the fingerprints and the goodbye and takes the verdicts, ZeroMQ's
// I/O threads answer the coordinator's pings (one unanswered for 1.5 s closes a connection, and a rank that does not
// reconnect within the vanish grace is a verdict), and the coordinator's lateness would be every rank's.
//
// One way, without privilege: an unprivileged thread cannot leave SCHED_IDLE (RLIMIT_NICE is 0 by default), and
// threads it starts inherit it. The frame thread starts none. This matters at the end: a process is gone only once
// each of its threads has run its own exit, and an idle-class thread on a node whose cores are all busy waits its turn
// for that too (verdict_under_load.sh, 1-2 busy loops per core: all ranks out in 0.6-1.1 s instead of 0.2 s). So
// before the process ends, leave_idle_class() puts the frame thread back in the normal class where the process may
// (root, CAP_SYS_NICE, or RLIMIT_NICE of 20): then it ends at once; elsewhere the end waits as measured, or
// TRAINSCOPE_THREAD_CLASS=normal avoids it.
// libc only.
#pragma once

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace trainscope {

// Moves the calling thread into SCHED_IDLE. Returns 0, or the errno of the refusal (a seccomp filter, a kernel
// without the class): the thread then stays in its class, which is only slower for the job, never wrong.
inline int enter_idle_class() {
  sched_param param{};
  param.sched_priority = 0;
  return pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
}

// The calling thread's kernel id (gettid() itself is glibc 2.30, after the wheel's floor of 2.28).
inline pid_t this_thread_id() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Moves thread `tid` of this process back into the normal class (SCHED_OTHER, nice 0). Returns 0, or the errno of the
// refusal (EPERM without CAP_SYS_NICE or an RLIMIT_NICE of 20).
inline int leave_idle_class(pid_t tid) {
  sched_param param{};
  param.sched_priority = 0;
  return sched_setscheduler(tid, SCHED_OTHER, &param) == 0 ? 0 : errno;
}

}  // namespace trainscope
