"""Checks every ELF file of a wheel against its manylinux policy, naming each file and symbol that breaks it.

  python check_wheel_policy.py WHEEL [--floor PATH=GLIBC_X.Y ...]

The policy is the one the wheel's platform tag names (manylinux_2_28_x86_64), read from auditwheel's own policy table
(the same one `auditwheel show` judges by), so that the two cannot disagree on what the policy allows. For each ELF:
- every versioned symbol it needs (GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*, ...) must be one the policy lists;
- every library it needs (DT_NEEDED) must be one of the policy's system libraries, the dynamic loader, or a file of
  the wheel.
--floor PATH=GLIBC_X.Y holds the file at PATH inside the wheel to an older glibc still, and to glibc's own libraries
(trainscope/lib/libtrainscope.so, loaded into every process of a job: GLIBC_2.17).
Runs where auditwheel is installed (it brings pyelftools). Exit status 1 with one line per violation, 0 when clean.
"""

import argparse
import io
import json
import os
import re
import sys
import zipfile

import auditwheel
from elftools.elf.elffile import ELFFile

# The dynamic loader: every program's interpreter, needed by name by a library that uses its symbols (TLS).
LOADERS = {"ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# What a file held to a floor may need: glibc's own libraries.
GLIBC_LIBRARIES = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6"} | LOADERS


def version_tuple(text):
    return tuple(int(part) for part in text.split("."))


def load_policy(tag):
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if match is None:
        sys.exit("check_wheel_policy: the wheel's platform tag %s is no manylinux_X_Y_ARCH tag" % tag)
    name, arch = "manylinux_%s_%s" % (match.group(1), match.group(2)), match.group(3)
    path = os.path.join(os.path.dirname(auditwheel.__file__), "policy", "manylinux-policy.json")
    with open(path) as f:
        for policy in json.load(f):
            if policy["name"] == name or name in policy.get("aliases", []):
                if arch not in policy["symbol_versions"]:
                    sys.exit("check_wheel_policy: %s has no symbol versions for %s" % (name, arch))
                return name, policy["symbol_versions"][arch], set(policy["lib_whitelist"])
    sys.exit("check_wheel_policy: auditwheel knows no policy %s (%s)" % (name, path))


def needed_versions(elf):
    """(symbol, version) for every undefined dynamic symbol bound to a version another object defines."""
    verneed = elf.get_section_by_name(".gnu.version_r")
    versym = elf.get_section_by_name(".gnu.version")
    dynsym = elf.get_section_by_name(".dynsym")
    if verneed is None or versym is None or dynsym is None:
        return []
    names = {}
    for _, auxiliaries in verneed.iter_versions():
        for aux in auxiliaries:
            names[aux["vna_other"]] = aux.name
    out = []
    for index, symbol in enumerate(dynsym.iter_symbols()):
        if symbol["st_shndx"] != "SHN_UNDEF" or not symbol.name:
            continue
        ndx = versym.get_symbol(index)["ndx"]
        if isinstance(ndx, int) and ndx & 0x7FFF in names:
            out.append((symbol.name, names[ndx & 0x7FFF]))
    # A version needed with no symbol bound to it (a verneed entry alone) still needs that version of the target.
    bound = {version for _, version in out}
    out.extend(("(no symbol)", name) for name in names.values() if name not in bound)
    return out


def needed_libraries(elf):
    dynamic = elf.get_section_by_name(".dynamic")
    if dynamic is None:
        return []
    return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


def interpreter(elf):
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_INTERP":
            return os.path.basename(segment.get_interp_name())
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel")
    parser.add_argument("--floor", action="append", default=[], metavar="PATH=GLIBC_X.Y")
    args = parser.parse_args()

    floors = {}
    for floor in args.floor:
        path, _, version = floor.partition("=")
        if not version.startswith("GLIBC_"):
            sys.exit("check_wheel_policy: --floor %s: expected PATH=GLIBC_X.Y" % floor)
        floors[path] = version_tuple(version[len("GLIBC_"):])

    tag = os.path.basename(args.wheel)[:-len(".whl")].split("-")[-1]
    name, versions, system_libraries = load_policy(tag)
    violations = []
    checked = []
    with zipfile.ZipFile(args.wheel) as wheel:
        files = wheel.namelist()
        bundled = {os.path.basename(f) for f in files}
        for member in files:
            data = wheel.read(member)
            if not data.startswith(b"\x7fELF"):
                continue
            checked.append(member)
            elf = ELFFile(io.BytesIO(data))
            floor = floors.get(member)
            for symbol, version in needed_versions(elf):
                prefix, _, number = version.partition("_")
                if version not in ("%s_%s" % (prefix, v) for v in versions.get(prefix, [])):
                    violations.append("%s: %s needs %s, which %s does not allow" % (member, symbol, version, name))
                elif floor is not None and prefix == "GLIBC" and version_tuple(number) > floor:
                    violations.append("%s: %s needs %s, newer than its floor GLIBC_%s" %
                                      (member, symbol, version, ".".join(map(str, floor))))
            interp = interpreter(elf)
            for library in needed_libraries(elf):
                if floor is not None and library not in GLIBC_LIBRARIES:
                    violations.append("%s: needs %s; it may need glibc's libraries only" % (member, library))
                elif library not in system_libraries | LOADERS | bundled | {interp}:
                    violations.append("%s: needs %s, which is neither one of %s's system libraries nor in the wheel"
                                      % (member, library, name))
        missing = sorted(set(floors) - set(checked))
        for path in missing:
            violations.append("%s: given a floor, but the wheel has no such ELF file" % path)
    for violation in violations:
        print("check_wheel_policy: " + violation)
    if violations:
        return 1
    print("check_wheel_policy: %d ELF files of %s meet %s%s" % (
        len(checked), os.path.basename(args.wheel), name,
        "".join(" (%s: GLIBC_%s)" % (p, ".".join(map(str, f))) for p, f in sorted(floors.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
