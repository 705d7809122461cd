// Symbol look-ups in the loaded objects' ELF tables (see elf_symbols.h).
#include "shim/elf_symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>

// _DYNAMIC (declared by link.h, defined by the linker) is this library's own dynamic section: it tells our own entry
// in the link map apart from the others.

namespace trainscope::shim::elf {
namespace {

// No libc string functions here: a sanitizer runtime preloaded before us intercepts them, and its start-up calls our
// dlsym (to set those very interceptors up) before they work.
bool same_string(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

bool starts_with(const char* text, const char* prefix) {
  while (*prefix != '\0' && *text == *prefix) {
    ++text;
    ++prefix;
  }
  return *prefix == '\0';
}

// What one object's dynamic section says about its symbols.
struct SymbolTables {
  const ElfW(Sym) * symbols = nullptr;
  const char* strings = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Versym) * versions = nullptr;
};

// glibc rewrites the dynamic section's addresses to absolute ones when the section is writable; a read-only one
// (the vDSO, some architectures) keeps them relative to the load address. Every address inside an object is at or
// above its load address, so a smaller value is still relative.
template <typename T>
const T* absolute(const link_map* map, ElfW(Addr) value) {
  if (value < map->l_addr) value += map->l_addr;
  return reinterpret_cast<const T*>(value);
}

bool read_tables(const link_map* map, SymbolTables* out) {
  if (map->l_ld == nullptr) return false;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        out->symbols = absolute<ElfW(Sym)>(map, d->d_un.d_ptr);
        break;
      case DT_STRTAB:
        out->strings = absolute<char>(map, d->d_un.d_ptr);
        break;
      case DT_GNU_HASH:
        out->gnu_hash = absolute<uint32_t>(map, d->d_un.d_ptr);
        break;
      case DT_HASH:
        out->sysv_hash = absolute<uint32_t>(map, d->d_un.d_ptr);
        break;
      case DT_VERSYM:
        out->versions = absolute<ElfW(Versym)>(map, d->d_un.d_ptr);
        break;
      default:
        break;
    }
  }
  return out->symbols != nullptr && out->strings != nullptr && (out->gnu_hash != nullptr || out->sysv_hash != nullptr);
}

// A definition dlsym would hand out: defined here, global or weak, a function, object or TLS-free kind, and
// (when the object has versions) the default version, not a hidden compatibility one.
bool is_default_definition(const SymbolTables& t, uint32_t index, const char* name) {
  const ElfW(Sym)& sym = t.symbols[index];
  if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) return false;
  const unsigned binding = ELF64_ST_BIND(sym.st_info);
  if (binding != STB_GLOBAL && binding != STB_WEAK) return false;
  const unsigned type = ELF64_ST_TYPE(sym.st_info);
  if (type != STT_FUNC && type != STT_OBJECT && type != STT_NOTYPE) return false;
  if (t.versions != nullptr) {
    const ElfW(Versym) version = t.versions[index];
    if ((version & 0x8000) != 0 || (version & 0x7fff) == 0) return false;  // hidden, or local
  }
  return same_string(t.strings + sym.st_name, name);
}

uint32_t gnu_hash_of(const char* name) {
  uint32_t h = 5381;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) h = h * 33 + *p;
  return h;
}

uint32_t sysv_hash_of(const char* name) {
  uint32_t h = 0;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) {
    h = (h << 4) + *p;
    const uint32_t g = h & 0xf0000000u;
    if (g != 0) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

const ElfW(Sym) * find_in(const SymbolTables& t, const char* name) {
  if (t.gnu_hash != nullptr) {
    const uint32_t buckets_count = t.gnu_hash[0];
    const uint32_t first_symbol = t.gnu_hash[1];
    const uint32_t bloom_words = t.gnu_hash[2];
    const uint32_t bloom_shift = t.gnu_hash[3];
    if (buckets_count == 0 || bloom_words == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(t.gnu_hash + 4);
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_words);
    const uint32_t* chain = buckets + buckets_count;
    const uint32_t h = gnu_hash_of(name);
    constexpr uint32_t kBits = sizeof(ElfW(Addr)) * 8;
    const ElfW(Addr) word = bloom[(h / kBits) % bloom_words];
    const ElfW(Addr) mask = (ElfW(Addr){1} << (h % kBits)) | (ElfW(Addr){1} << ((h >> bloom_shift) % kBits));
    if ((word & mask) != mask) return nullptr;
    uint32_t index = buckets[h % buckets_count];
    if (index < first_symbol) return nullptr;
    for (;; ++index) {
      const uint32_t entry = chain[index - first_symbol];
      if ((entry | 1) == (h | 1) && is_default_definition(t, index, name)) return &t.symbols[index];
      if ((entry & 1) != 0) return nullptr;
    }
  }
  const uint32_t buckets_count = t.sysv_hash[0];
  if (buckets_count == 0) return nullptr;
  const uint32_t* buckets = t.sysv_hash + 2;
  const uint32_t* chain = buckets + buckets_count;
  for (uint32_t index = buckets[sysv_hash_of(name) % buckets_count]; index != 0; index = chain[index])
    if (is_default_definition(t, index, name)) return &t.symbols[index];
  return nullptr;
}

void* definition_in(const link_map* map, const char* name) {
  SymbolTables tables;
  if (!read_tables(map, &tables)) return nullptr;
  const ElfW(Sym)* sym = find_in(tables, name);
  return sym != nullptr ? reinterpret_cast<void*>(map->l_addr + sym->st_value) : nullptr;
}

bool is_vdso(const link_map* map) {
  const char* name = map->l_name;
  return name != nullptr && starts_with(name, "linux-vdso");
}

// This library's own entry in the link map (dladdr1 rather than _r_debug, which would make us depend on ld.so).
const link_map* own_object() {
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&own_object), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0)
    return nullptr;
  return map;
}

const link_map* first_object() {
  const link_map* map = own_object();
  while (map != nullptr && map->l_prev != nullptr) map = map->l_prev;
  return map;
}

}  // namespace

void* next_definition(const char* name) {
  const link_map* map = own_object();
  if (map == nullptr) return nullptr;
  for (map = map->l_next; map != nullptr; map = map->l_next) {
    if (is_vdso(map)) continue;
    if (void* address = definition_in(map, name)) return address;
  }
  return nullptr;
}

void* definition_in_object_of(const void* address, const char* name) {
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr) return nullptr;
  if (map->l_ld == _DYNAMIC) return nullptr;
  return definition_in(map, name);
}

void* any_other_definition(const char* name) {
  for (const link_map* map = first_object(); map != nullptr; map = map->l_next) {
    if (map->l_ld == _DYNAMIC || is_vdso(map)) continue;
    if (void* address = definition_in(map, name)) return address;
  }
  return nullptr;
}

bool for_each_object(ObjectVisitor visit, void* context) {
  for (const link_map* map = first_object(); map != nullptr; map = map->l_next) {
    if (map->l_ld == _DYNAMIC || is_vdso(map)) continue;
    if (visit(map, map->l_name != nullptr ? map->l_name : "", context)) return true;
  }
  return false;
}

bool object_defines(const void* object, const char* name) {
  return object != nullptr && definition_in(static_cast<const link_map*>(object), name) != nullptr;
}

}  // namespace trainscope::shim::elf
