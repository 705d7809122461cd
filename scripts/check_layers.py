#!/usr/bin/env python3
"""Fails on an #include that goes against the source tree's layers (docs/layers.md), naming the file, the line and
the two layers; prints the folder include graph with --graph. Run by scripts/test.sh.

The layers, bottom first: a file may include files of its own layer and of the layers below it, never above.
"""
import os
import re
import sys

# Bottom first. A path is in the layer of the longest prefix that matches it.
LAYERS = [
    ("base", ["base/"]),
    ("kernels", ["kernels/"]),
    ("collectors", ["collectors/launches/"]),
    ("live reports", ["reports/"]),
    ("exchange and frames", ["collectors/exchange/", "collectors/frames/"]),
    ("shim", ["shim/"]),
    # The engine, in three: what both its worlds use (its log, the two adapters' hand-off state), what runs inside the
    # job's calls, and its entry points and own threads.
    ("engine shared", ["shim/engine/shared/"]),
    ("engine job thread", ["shim/engine/job_thread/"]),
    ("engine", ["shim/engine/"]),
    ("analysis", ["analysis/"]),
    ("tools", ["tools/", "demo/", "python/"]),
]
SOURCES = (".h", ".cc", ".c", ".cu", ".cuh")


def skipped(top):
    # Tests may include anything; build trees and hidden folders (checkouts of clients, venvs) are not sources.
    return top == "tests" or top.startswith(("build", "."))


def layer_of(path):
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if path.startswith(prefix) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def sources(root):
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        if rel != "." and skipped(rel.split(os.sep)[0]):
            dirs[:] = []
            continue
        for name in files:
            if name.endswith(SOURCES):
                yield os.path.normpath(os.path.join(rel, name))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    problems, unplaced, graph = [], set(), {}
    for path in sorted(sources(root)):
        own = layer_of(path)
        if own is None:
            unplaced.add(path)
            continue
        with open(os.path.join(root, path), errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = include.match(line)
                if not m or not os.path.exists(os.path.join(root, m.group(1))):
                    continue  # system headers, generated headers and same-folder includes by bare name
                target = layer_of(m.group(1))
                if target is None:
                    continue
                a, b = os.path.dirname(path), os.path.dirname(m.group(1))
                if a != b:
                    graph[(a, b)] = graph.get((a, b), 0) + 1
                if target > own:
                    problems.append(f"{path}:{number}: includes {m.group(1)}: layer '{LAYERS[own][0]}' may not "
                                    f"include layer '{LAYERS[target][0]}' (above it)")
    if "--graph" in sys.argv:
        for (a, b), n in sorted(graph.items()):
            print(f"{a:24} -> {b:24} {n}")
    for path in sorted(unplaced):
        problems.append(f"{path}: in no layer: add its folder to LAYERS in scripts/check_layers.py and docs/layers.md")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layers (docs/layers.md)", file=sys.stderr)
        return 1
    print(f"check_layers: every include follows the layers ({' < '.join(n for n, _ in LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
