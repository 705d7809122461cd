// Loaded-NCCL detection and the no-calls note (see nccl_presence.h).
#include "shim/nccl_presence.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/private_files.h"
#include "shim/elf_symbols.h"

namespace trainscope::shim {
namespace {

struct Search {
  char* path;
  size_t path_len;
};

bool is_nccl(const void* object, const char* path, void* context) {
  const char* slash = strrchr(path, '/');
  const char* file = slash != nullptr ? slash + 1 : path;
  if (strncmp(file, "libnccl", 7) != 0 && !elf::object_defines(object, "ncclCommInitRank")) return false;
  auto* search = static_cast<Search*>(context);
  snprintf(search->path, search->path_len, "%s", path[0] != '\0' ? path : "(the main program)");
  return true;
}

bool is_cuda_driver(const void* object, const char* path, void*) {
  const char* slash = strrchr(path, '/');
  const char* file = slash != nullptr ? slash + 1 : path;
  return strncmp(file, "libcuda.so", 10) == 0 || elf::object_defines(object, "cuDevicePrimaryCtxRetain");
}

// Appends `text` as a JSON string (quotes and escapes included); stops quietly at the end of the buffer.
void append_json_string(char* out, size_t out_len, size_t* used, const char* text) {
  auto put = [&](const char* piece, size_t n) {
    if (*used + n >= out_len) return;
    memcpy(out + *used, piece, n);
    *used += n;
    out[*used] = '\0';
  };
  put("\"", 1);
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(text); *p != 0; ++p) {
    char escaped[8];
    if (*p == '"' || *p == '\\') {
      escaped[0] = '\\';
      escaped[1] = static_cast<char>(*p);
      put(escaped, 2);
    } else if (*p < 0x20 || *p == 0x7f) {
      snprintf(escaped, sizeof(escaped), "\\u%04x", *p);
      put(escaped, 6);
    } else {
      put(reinterpret_cast<const char*>(p), 1);  // UTF-8 passes through; invalid bytes are the reader's to replace
    }
  }
  put("\"", 1);
}

void append_text(char* out, size_t out_len, size_t* used, const char* text) {
  const size_t n = strlen(text);
  if (*used + n >= out_len) return;
  memcpy(out + *used, text, n + 1);
  *used += n;
}

}  // namespace

bool find_loaded_nccl(char* path, size_t path_len) {
  Search search{path, path_len};
  return elf::for_each_object(is_nccl, &search);
}

bool cuda_driver_loaded() { return elf::for_each_object(is_cuda_driver, nullptr); }

int write_no_calls_note(const NoCallsNote& note) {
  char path[4200];
  if (snprintf(path, sizeof(path), "%s/%s%s", note.run_dir, note.stem, kNoCallsSuffix) >=
      static_cast<int>(sizeof(path)))
    return ENAMETOOLONG;
  char json[4096];
  size_t used = 0;
  json[0] = '\0';
  char number[64];
  append_text(json, sizeof(json), &used, "{\"kind\": \"nccl_without_calls\", \"pid\": ");
  snprintf(number, sizeof(number), "%d", static_cast<int>(note.pid));
  append_text(json, sizeof(json), &used, number);
  append_text(json, sizeof(json), &used, ", \"rank\": ");
  if (note.rank >= 0) {
    snprintf(number, sizeof(number), "%d", static_cast<int>(note.rank));
    append_text(json, sizeof(json), &used, number);
  } else {
    append_text(json, sizeof(json), &used, "null");
  }
  append_text(json, sizeof(json), &used, ", \"host\": ");
  append_json_string(json, sizeof(json), &used, note.host);
  append_text(json, sizeof(json), &used, ", \"exe\": ");
  append_json_string(json, sizeof(json), &used, note.exe);
  append_text(json, sizeof(json), &used, ", \"nccl\": ");
  append_json_string(json, sizeof(json), &used, note.nccl_path);
  snprintf(number, sizeof(number), ", \"calls\": %llu, \"communicators\": 0, \"cuda_driver\": %s}\n",
           static_cast<unsigned long long>(note.calls), note.cuda_driver ? "true" : "false");
  append_text(json, sizeof(json), &used, number);
  return files::write_new_file(path, json, used);
}

}  // namespace trainscope::shim
