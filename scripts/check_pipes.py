#!/usr/bin/env python3
"""Finds pipeline readers that leave before their writer is done, in the shell scripts that set pipefail.

`writer | head -n 1` and `writer | grep -q X` stop reading at the first line they want. A writer that writes again
afterwards (ldd --version writes line by line) is ended by SIGPIPE, the pipeline's status becomes 141 under pipefail,
and `set -e` then stops the script with that status and no message, or a `!` turns it into a false pass. Whether it
happens depends on scheduling: the Debian 11 step of the test command ended so once, silently, with 141. `sed -n 1p` and `grep X >/dev/null`
read all their input and say the same.

Usage: scripts/check_pipes.py [FILE...]   (default: every tracked *.sh); exit 1 with one line per finding.
"""
import re
import subprocess
import sys

EARLY_READER = re.compile(r"\|\s*(head\b|grep\s+(?:-[A-Za-z]*[qm]|--quiet|--max-count))")


def main(paths):
    if not paths:
        paths = subprocess.run(["git", "ls-files", "*.sh"], capture_output=True, text=True, check=True).stdout.split()
    findings = 0
    for path in paths:
        with open(path, encoding="utf-8") as script:
            lines = script.read().splitlines()
        if not any("pipefail" in line for line in lines):
            continue
        for number, line in enumerate(lines, 1):
            code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            match = EARLY_READER.search(code)
            if match:
                findings += 1
                print(f"{path}:{number}: '{match.group(0).strip()}' may end its writer with SIGPIPE under pipefail; "
                      "read all the input instead (sed -n 1p, sed -n 1,Np, grep PATTERN >/dev/null)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
