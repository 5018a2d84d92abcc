/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * An LD_PRELOAD shim for tests that count how often a program opens each file: every open(),
 * open64(), openat(), openat64(), fopen() and fopen64() appends the path it was given, one per
 * line, to the file METRALE_TEST_OPEN_LOG names (nothing is logged when it is unset), then does
 * what the real call does. The log is written with raw system calls, so logging opens nothing
 * through the functions it wraps. Used by tests/layers/open_counts_test.py.
 */
#define _GNU_SOURCE
/* Both open() and open64() are defined here: without this, glibc maps open() onto open64(). */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void log_open(const char* path) {
  const char* log = getenv("METRALE_TEST_OPEN_LOG");
  if (!log || !path) return;
  long fd = syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t unused = write((int)fd, path, strlen(path));
  unused = write((int)fd, "\n", 1);
  (void)unused;
  syscall(SYS_close, fd);
}

/* The next definition of `name` (libc's), through memcpy: ISO C has no cast from object to
 * function pointer. */
#define NEXT(real, name)                   \
  do {                                     \
    void* symbol = dlsym(RTLD_NEXT, name); \
    memcpy(&(real), &symbol, sizeof(real)); \
  } while (0)

/* The mode argument exists only with O_CREAT or O_TMPFILE. */
static mode_t mode_of(int flags, va_list args) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(args, int) : 0;
}

#define WRAP_OPEN(name)                                                          \
  int name(const char* path, int flags, ...) {                                   \
    static int (*real)(const char*, int, ...);                                   \
    if (!real) NEXT(real, #name);                                                \
    va_list args;                                                                \
    va_start(args, flags);                                                       \
    mode_t mode = mode_of(flags, args);                                          \
    va_end(args);                                                                \
    log_open(path);                                                              \
    return real(path, flags, mode);                                              \
  }
WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(name)                                                              \
  int name(int dir, const char* path, int flags, ...) {                                \
    static int (*real)(int, const char*, int, ...);                                    \
    if (!real) NEXT(real, #name);                                                      \
    va_list args;                                                                      \
    va_start(args, flags);                                                             \
    mode_t mode = mode_of(flags, args);                                                \
    va_end(args);                                                                      \
    log_open(path);                                                                    \
    return real(dir, path, flags, mode);                                               \
  }
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

#define WRAP_FOPEN(name)                                                               \
  FILE* name(const char* path, const char* mode) {                                     \
    static FILE* (*real)(const char*, const char*);                                    \
    if (!real) NEXT(real, #name);                                                      \
    log_open(path);                                                                    \
    return real(path, mode);                                                           \
  }
WRAP_FOPEN(fopen)
WRAP_FOPEN(fopen64)
