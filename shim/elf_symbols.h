// Symbol look-ups in the loaded objects' own ELF tables, without dlsym and without dl_iterate_phdr.
//
// The shim interposes dlsym itself, so it cannot ask dlsym for the real dlsym; and a sanitizer runtime preloaded
// before us intercepts dl_iterate_phdr and calls our dlsym before its own interceptors are set up. So the loaded
// objects are walked through the dynamic linker's link map (found from our own entry, dladdr1) and each object's
// dynamic symbol table is searched through its GNU (or SysV) hash table. Freestanding: libc only.
#pragma once

#include <cstddef>

namespace trainscope::shim::elf {

// The address of the first default-version definition of `name` (a function or object exported by an object's
// dynamic symbol table: defined, global or weak, not a hidden version) in the objects loaded after this library,
// in link-map order — what dlsym(RTLD_NEXT, name) would find for a caller in this library, for the objects loaded
// at start-up. nullptr when none defines it.
void* next_definition(const char* name);

// The first default-version definition of `name` in any loaded object but this library, in link-map order: for a
// copy of this library that was dlopen()ed rather than preloaded (nothing after it defines libc's functions).
void* any_other_definition(const char* name);

// The default-version definition of `name` in the object that contains `address` (a return address into it),
// nullptr when that object does not export one.
void* definition_in_object_of(const void* address, const char* name);

// Calls `visit(object, path, context)` for every loaded object other than this library and the vDSO, in link-map
// order, until it returns true; returns whether one did. `object` is opaque (for object_defines); `path` may be ""
// for the main program.
using ObjectVisitor = bool (*)(const void* object, const char* path, void* context);
bool for_each_object(ObjectVisitor visit, void* context);

// Whether `object` (as given to a for_each_object visitor) exports a default-version definition of `name`.
bool object_defines(const void* object, const char* name);

}  // namespace trainscope::shim::elf
