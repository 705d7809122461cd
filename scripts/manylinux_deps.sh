#!/usr/bin/env bash
# Builds the engine's and the command's native dependencies for the manylinux wheel (cmake/ManylinuxToolchain.cmake):
# ZeroMQ and libsodium as static, position-independent libraries compiled by Zig against the glibc floor's headers,
# from Debian's source packages (apt-get source, the versions of the installed -dev packages that the developer build
# uses); and the header-only libraries (spdlog, fmt, nlohmann-json, cppzmq) copied from the installed -dev packages.
# Nothing is downloaded but Debian's source packages.
#
# Usage: manylinux_deps.sh ZIG TARGET CACHE_DIR
#   ZIG: the zig binary; TARGET: Zig's target with the glibc floor (x86_64-linux-gnu.2.28); CACHE_DIR: where the
#   builds are kept (CACHE_DIR/deps/<key>, key = a hash of this script, Zig's version, the target and every source's
#   version). Prints the prefix (include/, lib/) on stdout; an unchanged key is a cache hit and builds nothing.
# Needs apt-get and dpkg-source (dpkg-dev), autoconf, automake, libtool, cmake, ninja (scripts/setup.sh installs them).
set -euo pipefail
zig="$1"
target="$2"
cache="$3"
script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")"
fail() {
  echo "manylinux_deps: $*" >&2
  exit 1
}
log() { echo "manylinux_deps: $*" >&2; }

# Compiled from source: source package and the -dev package whose installed version picks the source's version.
compiled=(zeromq3:libzmq3-dev libsodium:libsodium-dev)
# Header-only: the -dev package and the paths under /usr/include that are copied.
header_only=("libspdlog-dev:spdlog" "libfmt-dev:fmt" "nlohmann-json3-dev:nlohmann" "cppzmq-dev:zmq.hpp zmq_addon.hpp")

installed_version() { dpkg-query -W -f='${Status} ${source:Version}\n' "$1" 2>/dev/null | sed -n 's/^install ok installed //p'; }

[ -x "$zig" ] || fail "no zig at $zig"
zig_version="$("$zig" version)" || fail "$zig does not run"
inputs="script $(sha256sum "$script" | cut -c1-64)
zig $zig_version
target $target"
for entry in "${compiled[@]}" "${header_only[@]%%:*}"; do
  package="${entry#*:}"
  version="$(installed_version "$package")"
  [ -n "$version" ] || fail "$package is not installed (scripts/setup.sh installs it): its version picks the source"
  inputs+="
$package $version"
done
key="$(sha256sum <<<"$inputs" | cut -c1-16)"
prefix="$cache/deps/$target-$key"
if [ -f "$prefix/MANIFEST" ]; then
  echo "$prefix"
  exit 0
fi

mkdir -p "$cache/deps" "$cache/sources"
# One build at a time per cache (two pip builds at once wait for each other, up to 30 minutes).
exec 9>"$cache/deps/.lock"
flock -w 1800 9 || fail "another build has held $cache/deps/.lock for 30 minutes"
if [ -f "$prefix/MANIFEST" ]; then
  echo "$prefix"
  exit 0
fi
log "building ZeroMQ and libsodium for $target with Zig $zig_version into $prefix (once per version: a few minutes)"
work="$(mktemp -d "$cache/deps/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Debian's source packages through a private apt configuration: the system's own suites (those of this release's
# codename) as deb-src entries, their lists kept in the cache; the system's apt configuration is left as it is.
apt_dir="$cache/apt"
mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/archives/partial"
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ -n "$codename" ] || fail "/etc/os-release names no VERSION_CODENAME: cannot tell which suites are the system's"
rm -f "$apt_dir/parts/"*
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  sed -n -E "s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+($codename(-[a-z]+)?)[[:space:]]/deb-src \1\2 \3 /p" \
    "$f" >>"$apt_dir/parts/system.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  # deb822 stanzas: keep those whose Suites are all this release's, as deb-src.
  awk -v codename="$codename" '
    function flush() {
      if (stanza != "" && ok) print stanza "\n"
      stanza = ""; ok = 0
    }
    /^[[:space:]]*$/ { flush(); next }
    /^#/ { next }
    /^Types:/ { $0 = "Types: deb-src" }
    /^Suites:/ {
      ok = 1
      for (i = 2; i <= NF; i++) if ($i !~ ("^" codename "(-[a-z]+)?$")) ok = 0
    }
    { stanza = stanza (stanza == "" ? "" : "\n") $0 }
    END { flush() }' "$f" >"$apt_dir/parts/$(basename "$f")"
done
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/parts"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::Archives=$apt_dir/archives" -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root")
timeout 300 apt-get "${apt_opts[@]}" update -qq >"$work/apt-update.log" 2>&1 ||
  { cat "$work/apt-update.log" >&2; fail "apt-get update of the source lists failed"; }

mkdir -p "$work/src" "$work/prefix/include" "$work/prefix/lib"
for entry in "${compiled[@]}"; do
  source_package="${entry%%:*}"
  version="$(installed_version "${entry#*:}")"
  (cd "$cache/sources" && timeout 600 apt-get "${apt_opts[@]}" source --download-only -qq "$source_package=$version" \
    >"$work/apt-source.log" 2>&1) || { cat "$work/apt-source.log" >&2; fail "apt-get source $source_package=$version failed"; }
  dsc="$(ls "$cache/sources/${source_package}_${version#*:}.dsc")"
  dpkg-source --no-check -x "$dsc" "$work/src/$source_package" >"$work/dpkg-source.log" 2>&1 ||
    { cat "$work/dpkg-source.log" >&2; fail "unpacking $dsc failed"; }
done

# Zig as cc/c++/ar/ranlib for autotools and CMake.
mkdir -p "$work/bin"
for tool in cc c++ ar ranlib; do
  args="$tool"
  case "$tool" in cc | c++) args="$tool -target $target" ;; esac
  printf '#!/bin/sh\nZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-%s/zig}" exec "%s" %s "$@"\n' "$cache" "$zig" "$args" \
    >"$work/bin/$tool"
  chmod +x "$work/bin/$tool"
done
jobs="$(nproc)"

log "libsodium $(installed_version libsodium-dev)"
(cd "$work/src/libsodium" && autoreconf -fi && ./configure --prefix="$work/prefix" --libdir="$work/prefix/lib" \
  --disable-shared --enable-static --with-pic --disable-dependency-tracking \
  CC="$work/bin/cc" AR="$work/bin/ar" RANLIB="$work/bin/ranlib" CFLAGS="-O2" &&
  make -j "$jobs" && make install) >"$work/libsodium.log" 2>&1 || { tail -n 40 "$work/libsodium.log" >&2; fail "building libsodium failed"; }

log "ZeroMQ $(installed_version libzmq3-dev)"
# Only what the exchange uses: TCP and IPC with CURVE (on libsodium); no PGM, NORM, GSSAPI, WebSocket or drafts.
(PKG_CONFIG_LIBDIR="$work/prefix/lib/pkgconfig" cmake -S "$work/src/zeromq3" -B "$work/zmq-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$work/bin/cc" -DCMAKE_CXX_COMPILER="$work/bin/c++" \
  -DCMAKE_AR="$work/bin/ar" -DCMAKE_RANLIB="$work/bin/ranlib" -DCMAKE_INSTALL_PREFIX="$work/prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF \
  -DBUILD_SHARED=OFF -DBUILD_STATIC=ON -DBUILD_TESTS=OFF -DWITH_LIBSODIUM=ON -DWITH_LIBSODIUM_STATIC=ON \
  -DENABLE_CURVE=ON -DWITH_DOCS=OFF -DWITH_PERF_TOOL=OFF -DENABLE_DRAFTS=OFF -DENABLE_WS=OFF -DWITH_LIBBSD=OFF \
  -DWITH_OPENPGM=OFF -DWITH_NORM=OFF -DWITH_GSSAPI_KRB5=OFF -DENABLE_CPACK=OFF -DPOLLER=epoll &&
  cmake --build "$work/zmq-build" -j "$jobs" && cmake --install "$work/zmq-build") >"$work/zeromq.log" 2>&1 ||
  { tail -n 40 "$work/zeromq.log" >&2; fail "building ZeroMQ failed"; }
grep -q '^#define ZMQ_USE_LIBSODIUM' "$work/zmq-build/platform.hpp" || fail "ZeroMQ was configured without libsodium"

for entry in "${header_only[@]}"; do
  for path in ${entry#*:}; do
    [ -e "/usr/include/$path" ] || fail "/usr/include/$path is missing (package ${entry%%:*})"
    cp -a "/usr/include/$path" "$work/prefix/include/"
  done
done

# Only what the build links: the static libraries and the headers.
rm -rf "$work/prefix/lib/pkgconfig" "$work/prefix/lib/cmake" "$work/prefix/lib/"*.la "$work/prefix/share" \
  "$work/prefix/bin"
printf '%s\n' "$inputs" >"$work/prefix/MANIFEST"
rm -rf "$prefix"
mv "$work/prefix" "$prefix"
log "done: $prefix"
echo "$prefix"
