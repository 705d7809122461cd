"""Checks shim/python_stack.cc against this interpreter's own view of its stack (run by python_stack_test.cc).

Usage: pythonX.Y python_stack_check.py path/to/libts_pystack_probe.so
Runs on CPython 3.9 to 3.13 with the standard library only. Prints one line per check and the ns per stack_key()
at depth 30; exits 1 if any check failed. Every capture below is taken on the same line as the traceback it is
compared with ("...; want = expected_here()"), so that both see the same line numbers.
"""
import asyncio
import ctypes
import functools
import os
import sys
import threading
import traceback

MAX_CAPTURED = 64  # python_stack.h: kMaxCapturedFrames, kFileBytes, kFunctionBytes
FILE_BYTES = 256
FUNCTION_BYTES = 96
BUF = 1 << 16

failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else ": " + detail))
    if not ok:
        failures.append(what)


def load(path):
    cdll = ctypes.CDLL(path)  # releases the GIL around each call, as torch and NCCL bindings do
    pydll = ctypes.PyDLL(path)  # keeps it
    for lib in (cdll, pydll):
        lib.ts_probe_detect.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.ts_probe_key.restype = ctypes.c_uint64
        lib.ts_probe_capture.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.ts_probe_keys_stable.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
        lib.ts_probe_ns_per_key.argtypes = [ctypes.c_int]
        lib.ts_probe_ns_per_key.restype = ctypes.c_double
        lib.ts_probe_hold_gil.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.ts_probe_wait_byte.argtypes = [ctypes.c_int]
        lib.ts_probe_capture_while_held.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                                                    ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
        lib.ts_probe_native_thread.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return cdll, pydll


def expected_here():
    """The caller's stack as traceback sees it, innermost first: (line, file, function)."""
    stack = traceback.extract_stack(sys._getframe(1))
    return [(f.lineno, f.filename, f.name) for f in reversed(stack)]


def replace_surrogates(text):
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def keep_tail(text, limit):
    """A path as the reader writes it into limit bytes: whole, or "..." and the longest tail that fits."""
    text = replace_surrogates(text)
    if len(text.encode("utf-8")) < limit:
        return text
    tail = ""
    for c in reversed(text):
        if len((c + tail).encode("utf-8")) > limit - 1 - 3:
            break
        tail = c + tail
    return "..." + tail


def keep_head(text, limit):
    text = replace_surrogates(text)
    if len(text.encode("utf-8")) < limit:
        return text
    head = ""
    for c in text:
        if len((head + c).encode("utf-8")) > limit - 1 - 3:
            break
        head += c
    return head + "..."


def parse(buf):
    lines = buf.value.decode("utf-8").split("\n")
    depth = int(lines[0].split()[1])
    frames = []
    for line in lines[1:]:
        if line:
            number, path, name = line.split("\x1f")
            frames.append((int(number), path, name))
    return depth, frames


def compare(what, buf, n, want):
    depth, got = parse(buf)
    expect = [(line, keep_tail(path, FILE_BYTES), keep_head(name, FUNCTION_BYTES)) for line, path, name in want]
    expect = expect[:MAX_CAPTURED]
    detail = ""
    if got != expect:
        for i, (g, e) in enumerate(zip(got, expect)):
            if g != e:
                detail = "frame %d: got %r, traceback says %r" % (i, g, e)
                break
        else:
            detail = "got %d frames, traceback has %d" % (len(got), len(expect))
    elif n != len(expect) or depth != len(want):
        detail = "returned %d frames of depth %d, traceback has %d" % (n, depth, len(want))
    check(not detail, what, detail)


# -- the checks -------------------------------------------------------------------------------------------------


def check_detection(cdll):
    buf = ctypes.create_string_buffer(512)
    support = cdll.ts_probe_detect(buf, len(buf))
    fields = buf.value.decode().split(" ", 3)
    version = "%d.%d" % sys.version_info[:2]
    check(support == 1 and fields[1:3] == [str(sys.version_info[0]), str(sys.version_info[1])],
          "Python %s is detected and ready" % version, buf.value.decode())
    check(cdll.ts_probe_plain_reads() == 0, "no plain reads before a validated walk")


def concurrent_worker(lib, barrier, results, index):
    first = ctypes.c_uint64(0)
    barrier.wait(60)
    stable = lib.ts_probe_keys_stable(2000, ctypes.byref(first))
    results[index] = (stable, first.value)


def path_one(lib, barrier, results, index):
    concurrent_worker(lib, barrier, results, index)


def path_two(lib, barrier, results, index):
    concurrent_worker(lib, barrier, results, index)


def check_concurrent_first_keys(cdll):
    """The process's first keys, from 8 threads at once, half of them by another path: validation under contention."""
    count = 8
    barrier = threading.Barrier(count)
    results = [None] * count
    threads = [threading.Thread(target=path_one if i % 2 == 0 else path_two, args=(cdll, barrier, results, i))
               for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    check(all(r is not None and r[0] == 1 for r in results), "8 threads' keys are stable and not 0", repr(results))
    ones = set(r[1] for i, r in enumerate(results) if r and i % 2 == 0)
    twos = set(r[1] for i, r in enumerate(results) if r and i % 2 == 1)
    check(len(ones) == 1 and len(twos) == 1 and ones != twos,
          "threads on the same path share a key, the other path has another", "%r %r" % (ones, twos))
    check(cdll.ts_probe_plain_reads() == 1, "plain reads once a validated walk succeeded")


def inner_capture(lib):
    buf = ctypes.create_string_buffer(BUF)
    n = lib.ts_probe_capture(buf, BUF); want = expected_here()  # noqa: E702 (one line: the same line number)
    return buf, n, want


def outer_capture(lib):
    return inner_capture(lib)


def check_frames(cdll, pydll):
    compare("frames through ctypes.CDLL (GIL released)", *outer_capture(cdll))
    compare("frames through ctypes.PyDLL (GIL held)", *outer_capture(pydll))


def leaf_key(lib):
    return lib.ts_probe_key()


def path_a(lib):
    return leaf_key(lib)


def path_b(lib):
    return leaf_key(lib)


def check_keys(cdll, pydll):
    for lib, how in ((cdll, "CDLL"), (pydll, "PyDLL")):
        keys_a = []
        keys_b = []
        for _ in range(3):
            keys_a.append(path_a(lib))
            keys_b.append(path_b(lib))
        check(keys_a[0] != 0 and len(set(keys_a)) == 1 and len(set(keys_b)) == 1,
              "the same path gives the same key (%s)" % how, "%r %r" % (keys_a, keys_b))
        check(keys_a[0] != keys_b[0], "two paths to the same helper give different keys (%s)" % how)


def key_through_builtin(lib):
    return list(map(lib.ts_probe_key, [0]))[0]  # list() and map() are C: the call is made by the interpreter's C code


def capture_through_builtin(lib):
    buf = ctypes.create_string_buffer(BUF)
    n = list(map(functools.partial(lib.ts_probe_capture, buf), [BUF]))[0]; want = expected_here()  # noqa: E702
    return buf, n, want


def check_warm_call_sites(cdll):
    """A site called often enough to be specialised (3.11+ adaptive interpreter) keeps its key and its lines."""
    keys = []
    for _ in range(40):
        keys.append(key_through_builtin(cdll))
    check(keys[0] != 0 and len(set(keys)) == 1, "a call site keeps its key once specialised",
          "%d keys, changes at %r" % (len(set(keys)), [i for i in range(1, 40) if keys[i] != keys[i - 1]]))
    for _ in range(40):
        result = capture_through_builtin(cdll)
    compare("frames at a specialised call site", *result)


def check_thread(cdll):
    result = []
    thread = threading.Thread(target=lambda: result.append(outer_capture(cdll)))
    thread.start()
    thread.join(60)
    check(len(result) == 1, "a threading.Thread finished")
    if result:
        compare("frames in a threading.Thread", *result[0])


def generator(lib):
    buf = ctypes.create_string_buffer(BUF)
    n = lib.ts_probe_capture(buf, BUF); want = expected_here()  # noqa: E702
    yield buf, n, want
    yield lib.ts_probe_key()


async def coroutine(lib):
    await asyncio.sleep(0)  # suspended once and resumed by the event loop, not only started
    buf = ctypes.create_string_buffer(BUF)
    n = lib.ts_probe_capture(buf, BUF); want = expected_here()  # noqa: E702
    return buf, n, want, lib.ts_probe_key()


def check_generator_and_coroutine(cdll):
    gen = generator(cdll)
    compare("frames inside a generator", *next(gen))
    check(next(gen) != 0, "a key inside a generator")
    buf, n, want, key = asyncio.run(coroutine(cdll))
    compare("frames inside an asyncio coroutine", buf, n, want)
    check(key != 0, "a key inside an asyncio coroutine")


def recurse(lib, depth):
    if depth > 0:
        return recurse(lib, depth - 1)
    keys = []
    for _ in range(2):
        keys.append(lib.ts_probe_key())
    buf = ctypes.create_string_buffer(BUF)
    n = lib.ts_probe_capture(buf, BUF); want = expected_here()  # noqa: E702
    return keys, buf, n, want


def check_deep_recursion(cdll):
    keys, buf, n, want = recurse(cdll, 300)
    check(keys[0] != 0 and keys[0] == keys[1], "a key at depth %d" % len(want), repr(keys))
    check(n == MAX_CAPTURED, "a capture at depth %d is bounded to %d frames" % (len(want), MAX_CAPTURED), str(n))
    compare("frames at depth %d (the innermost %d)" % (len(want), MAX_CAPTURED), buf, n, want)


def hold_the_gil(cdll, pydll, go, signal, release, held):
    # Without the GIL until the main thread is inside its CDLL call, then with it until the main thread is done.
    if cdll.ts_probe_wait_byte(go):
        held.append(pydll.ts_probe_hold_gil(signal, release))


def check_while_another_thread_holds_the_gil(cdll, pydll):
    go_read, go_write = os.pipe()
    signal_read, signal_write = os.pipe()
    release_read, release_write = os.pipe()
    held = []
    holder = threading.Thread(target=hold_the_gil, args=(cdll, pydll, go_read, signal_write, release_read, held))
    holder.start()
    key = ctypes.c_uint64(0)
    buf = ctypes.create_string_buffer(BUF)
    n = cdll.ts_probe_capture_while_held(go_write, signal_read, release_write, buf, BUF, ctypes.byref(key)); want = expected_here()  # noqa: E702,E501
    holder.join(60)
    for fd in (go_read, go_write, signal_read, signal_write, release_read, release_write):
        os.close(fd)
    check(n >= 0 and held == [1], "another thread held the GIL during the capture", "%r %r" % (n, held))
    if n >= 0:
        compare("frames while another thread holds the GIL", buf, n, want)
    check(key.value != 0, "a key while another thread holds the GIL")


def check_native_thread(cdll):
    buf = ctypes.create_string_buffer(128)
    cdll.ts_probe_native_thread(buf, len(buf))
    check(buf.value.decode() == "key 0 frames 0", "a thread Python never saw has key 0 and no frames",
          buf.value.decode())


NAMES_SOURCE = """
def {name}(lib):
    buf = ctypes.create_string_buffer(BUF)
    n = lib.ts_probe_capture(buf, BUF); want = expected_here()
    return buf, n, want
"""


def check_names(cdll):
    """Every string kind (ASCII, Latin-1, UCS-2, UCS-4), and paths and names too long for their fields."""
    cases = [
        ("/tmp/plain.py", "plain"),
        ("/tmp/f\u00fcnf.py", "f\u00fcnf"),
        ("/tmp/\u51fd\u6570.py", "\u51fd\u6570"),
        ("/tmp/\U0002000b.py", "\U0002000b"),
        ("/tmp/" + "a" * 300 + ".py", "n" * 120),
        ("/tmp/" + "\u00e9" * 200 + ".py", "\u00e9" * 60),
        ("/tmp/" + "\u51fd" * 120 + "x.py", "\u51fd" * 40),
        ("/tmp/" + "\U0002000b" * 80 + ".py", "\U0002000b" * 30),
        ("/tmp/bad-\udcff-bytes.py", "surrogate_in_path"),
    ]
    for path, name in cases:
        namespace = {"ctypes": ctypes, "BUF": BUF, "expected_here": expected_here}
        exec(compile(NAMES_SOURCE.format(name=name), path, "exec"), namespace)
        compare("names: %s in %s" % (ascii(name[:12]), ascii(path[:24])), *namespace[name](cdll))


def descend(lib, depth, count):
    if depth > 1:
        return descend(lib, depth - 1, count)
    return lib.ts_probe_ns_per_key(count)


def report_speed(cdll):
    here = len(traceback.extract_stack())
    target = 30
    ns = descend(cdll, target - here, 200000)
    print("ns_per_stack_key python=%d.%d depth=%d %.1f" % (sys.version_info[0], sys.version_info[1], target, ns))


def main():
    cdll, pydll = load(sys.argv[1])
    check_detection(cdll)
    check_concurrent_first_keys(cdll)
    check_frames(cdll, pydll)
    check_keys(cdll, pydll)
    check_warm_call_sites(cdll)
    check_thread(cdll)
    check_generator_and_coroutine(cdll)
    check_deep_recursion(cdll)
    check_while_another_thread_holds_the_gil(cdll, pydll)
    check_native_thread(cdll)
    check_names(cdll)
    report_speed(cdll)
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
