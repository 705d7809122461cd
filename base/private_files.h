// How trainscope creates its files and folders: private (files 0600, folders 0700), never through a symbolic link,
// never replacing or appending to a file trainscope did not create. Freestanding (libc only): the preloaded shim uses
// it as the engine, the coordinator and the tools do.
//
//   int fd = create_file(path, O_WRONLY);            // a new file, or -errno (EEXIST when anything has the name)
//   int error = write_new_file(path, data, len);     // created whole or not at all (removed on every error)
//   error = replace_file(path, data, len);           // <path>.tmp.<pid>.<n> written, then renamed over path
//   error = replace_file_with(path, write, context); // the same, written piece by piece by write(fd, context)
//   error = append_file(path, data, len);            // created if missing; a link, FIFO or stranger's file refused
//   PrivateDirectory dir = make_private_directory(path);  // mkdir -p, then the folder itself checked and made 0700
//   error_text(error);                               // "it is a symbolic link", ..., else strerror
//
// Every error is an errno value or one of the refusals below; error_text() says what it means.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace trainscope::files {

// Refusals: what is at a path that trainscope will not write through or replace. Outside the range of errno values.
inline constexpr int kIsSymlink = 10001;     // a symbolic link
inline constexpr int kNotRegular = 10002;    // not a regular file (a folder, a FIFO, a device, a socket)
inline constexpr int kOtherOwner = 10003;    // a file of another user
inline constexpr int kHardLinked = 10004;    // a regular file with other names (hard links) besides this one
inline constexpr int kOthersWrite = 10005;   // a folder of another user that others can write to
inline constexpr int kNotDirectory = 10006;  // not a folder

// What a refusal or an errno value means, for a warning: "it is a symbolic link", "No space left on device".
const char* error_text(int error);

// Creates `path` exclusively, mode 0600: O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC added to `flags` (O_WRONLY or
// O_RDWR). Returns the descriptor, or -errno: -EEXIST when anything has the name, a symbolic link included.
int create_file(const char* path, int flags);

// Writes all `len` bytes (retrying short writes and EINTR). Returns 0 or an errno value.
int write_all(int fd, const void* data, size_t len);

// Creates `path` exclusively (create_file) holding `data`; on any error nothing is left at `path`.
int write_new_file(const char* path, const void* data, size_t len);

// Replaces `path` atomically with `data`: written whole to a fresh temporary beside it (<path>.tmp.<pid>.<n>, created
// exclusively, removed on every error), then renamed over `path` — only when `path` is missing or a regular file of
// this user with no other name. A reader, or a crash, never sees half a file; a 0-byte temporary never stays behind.
int replace_file(const char* path, const void* data, size_t len);

// As replace_file(), with the contents written by `write` into the temporary's descriptor as it makes them (a file too
// big to hold whole): `write` returns 0, or an errno value that abandons the replacement (the temporary is removed).
int replace_file_with(const char* path, int (*write)(int fd, void* context), void* context);

// Opens `path` to append to it (O_APPEND), creating it 0600 when missing. Refuses a symbolic link, anything but a
// regular file, a file of another user and a file with other hard links. Returns the descriptor or -error.
int open_append(const char* path);

// open_append(), write_all(), close.
int append_file(const char* path, const void* data, size_t len);

// The state of a run directory after make_private_directory().
struct PrivateDirectory {
  int error = 0;           // 0, an errno value (EACCES, ENOTDIR, ...) or a refusal (kIsSymlink, kOthersWrite, ...)
  uint32_t old_mode = 0;   // when it was ours but open to others: its permission bits before (it is now 0700)
  uint32_t owner_uid = 0;  // with kOthersWrite: whose folder it is
};

// Creates `path` and its missing parents, each 0700 (mkdir -p). Then `path` itself must be a private folder: a symbolic
// link or not a folder is refused; a folder of this user that others could enter or write to is made 0700 (old_mode
// says it was changed); a folder of another user that others can write to is refused. Parents are left as they are
// (TRAINSCOPE_DIR=/tmp is fine). Checked through the opened folder (O_DIRECTORY | O_NOFOLLOW, fstat, fchmod).
PrivateDirectory make_private_directory(const char* path);

}  // namespace trainscope::files
