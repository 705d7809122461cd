// A memory fence that also builds under ThreadSanitizer (GCC rejects atomic_thread_fence with -fsanitize=thread;
// TSan does not model fences anyway, so there a compiler-only barrier keeps the code's shape).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TS_THREAD_FENCE(order) __atomic_signal_fence(order)
#else
#define TS_THREAD_FENCE(order) __atomic_thread_fence(order)
#endif
