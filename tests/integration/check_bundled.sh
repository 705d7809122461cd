#!/usr/bin/env bash
# Checks an installed tree (cmake --install's prefix, or the wheel's site-packages/trainscope) for what it needs of
# the target machine: the preloaded library needs glibc only; the command and the engine link no libstdc++, and every
# library they load, resolved by the loader with an empty environment, is either inside the tree's lib/ or glibc's.
# A tree with bundled libraries (cmake --install) reaches them through an RPATH of $ORIGIN (no build-tree path, no
# RUNPATH); one without (the manylinux wheel links its dependencies statically) has no RPATH at all.
# Usage: check_bundled.sh TREE [LIBRARY...]   (TREE holds bin/trainscope and lib/; each LIBRARY must be bundled)
set -euo pipefail
tree="$(cd "$1" && pwd -P)"
fail() {
  echo "check_bundled: $*" >&2
  exit 1
}
is_glibc() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
      libresolv.so.* | libutil.so.* | libanl.so.* | libnsl.so.* | libmvec.so.*) return 0 ;;
  esac
  return 1
}

shift
for f in bin/trainscope lib/libtrainscope.so lib/libtrainscope-engine.so "${@/#/lib/}"; do
  [ -f "$tree/$f" ] || fail "missing: $f"
done
bundled="$(cd "$tree/lib" && ls | grep '^lib.*\.so\.' | grep -vc '^libtrainscope' || true)"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for name in $(needed "$tree/lib/libtrainscope.so"); do
  is_glibc "$name" || fail "lib/libtrainscope.so needs $name; it may need glibc only"
done
for f in bin/trainscope lib/libtrainscope-engine.so; do
  case "$f" in
    bin/*) want='$ORIGIN/../lib' ;;
    *) want='$ORIGIN' ;;
  esac
  [ "$bundled" -gt 0 ] || want=""
  rpath="$(readelf -d "$tree/$f" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')"
  [ "$rpath" = "$want" ] || fail "$f has RPATH '$rpath', expected '$want'"
  ! readelf -d "$tree/$f" | grep '(RUNPATH)' >/dev/null || fail "$f has a RUNPATH (it would hide the RPATH)"
  ! needed "$tree/$f" | grep '^libstdc++' >/dev/null || fail "$f needs libstdc++ (it is linked statically)"
  resolved="$(env -i /usr/bin/ldd "$tree/$f")"
  ! grep -q 'not found' <<<"$resolved" || fail "$f: unresolved libraries: $resolved"
  while read -r name _ path _; do
    is_glibc "$name" && continue
    path="$(realpath -m "$path")"
    case "$path" in
      "$tree"/lib/*) ;;
      *) fail "$f loads $name from $path, outside the package" ;;
    esac
  done < <(awk '/=>/ {print $1, $2, $3}' <<<"$resolved")
done
echo "check_bundled: $tree needs nothing but glibc ($bundled libraries bundled)"
