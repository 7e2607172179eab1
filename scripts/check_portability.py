#!/usr/bin/env python3
"""Lists Linux-only calls that are not behind a platform guard with a portable fallback; exits 1 if any.

Usage: check_portability.py DIR_OR_FILE...   (C++ sources and CMake files)

macOS (and any other POSIX system) lacks these calls, headers, flags and files: CPU affinity masks, /proc and
/sys, O_DIRECT and the other Linux open flags, posix_fadvise and readahead, memfd, Linux-only mmap/madvise
flags and sysconf names, and glibc's own functions. Each use must sit in a branch of an `#if` group whose
condition names `__linux__` (`#ifdef __linux__`, `#if defined(__linux__)`, `#elif defined(__linux__)`), and
that group must have another branch (`#else` or `#elif`): the fallback every other system compiles.
Comments are skipped; strings are not, so a path such as "/proc/self/exe" counts.

Build files (CMakeLists.txt, *.cmake) must not ask for the building machine's own instruction set
(-march=native and the like): such binaries fail on other CPUs and break universal macOS builds.
"""
import os
import re
import sys

from cpp_text import blank_comments

SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".cc", ".hpp")
BUILD_FILE_SUFFIXES = ("CMakeLists.txt", ".cmake")
NATIVE_FLAGS = re.compile(r"-m(arch|tune|cpu)=native")

# (pattern, what it is). Function names are matched before "(", so variables sharing a name do not count.
LINUX_ONLY = [
    (r"\b(sched_getaffinity|sched_setaffinity|pthread_setaffinity_np|pthread_getaffinity_np)\s*\(", "CPU affinity masks"),
    (r"\b(cpu_set_t|CPU_ZERO|CPU_SET|CPU_COUNT|CPU_ISSET)\b", "CPU affinity masks"),
    (r"\"/proc/", "the /proc file system"),
    (r"\"/sys/", "the /sys file system"),
    (r"\b(O_DIRECT|O_TMPFILE|O_NOATIME|O_PATH|O_LARGEFILE)\b", "a Linux open() flag"),
    (r"\b(posix_fadvise|readahead|fallocate|posix_fallocate|sync_file_range)\s*\(", "Linux page-cache and file-space calls"),
    (r"\b(POSIX_FADV_\w+)\b", "posix_fadvise advice"),
    (r"\b(memfd_create|mremap|sendfile|splice|tee|vmsplice|copy_file_range)\s*\(", "a Linux-only system call"),
    (r"\b(MFD_\w+|MAP_POPULATE|MAP_HUGETLB|MAP_LOCKED|MAP_NORESERVE|MADV_HUGEPAGE|MADV_POPULATE_READ|"
     r"MADV_POPULATE_WRITE|MADV_DONTDUMP)\b", "a Linux-only memory flag"),
    (r"\b(_SC_AVPHYS_PAGES|_SC_LEVEL\d\w*|_SC_NPROCESSORS_CONF_LINUX)\b", "a sysconf name glibc has and macOS lacks"),
    (r"\b(sysinfo|get_nprocs|get_nprocs_conf|get_phys_pages|prctl|gettid|getauxval|malloc_trim|mallinfo2?|"
     r"epoll_create1?|epoll_ctl|epoll_wait|inotify_init1?|inotify_add_watch|eventfd|timerfd_create|pipe2|accept4|"
     r"dup3|execvpe|sigtimedwait|sigwaitinfo|secure_getenv|strchrnul|memrchr|rawmemchr|pread64|pwrite64|lseek64|open64|fstat64|stat64)\s*\(",
     "a Linux or glibc-only function"),
    (r"#\s*include\s*<(linux/[^>]+|sys/sysinfo\.h|sys/prctl\.h|sys/epoll\.h|sys/inotify\.h|sys/sendfile\.h|"
     r"sys/auxv\.h|sys/eventfd\.h|sys/timerfd\.h|malloc\.h)>", "a Linux-only header"),
    (r"\bprogram_invocation_(short_)?name\b", "a glibc-only variable"),
]
LINUX_MACRO = re.compile(r"\b(__linux__|__linux|__gnu_linux__)\b")
NEGATED_LINUX = re.compile(r"(!\s*defined\s*\(?\s*(__linux__|__linux|__gnu_linux__)|#\s*ifndef)")


class Group:
    """One #if ... #endif group: its branches as (first line, condition) in order."""

    def __init__(self, line, condition):
        self.branches = [(line, condition)]
        self.end = None

    def branch_at(self, line):
        current = None
        for start, condition in self.branches:
            if start <= line:
                current = condition
        return current


def preprocessor_groups(lines):
    """Every #if group of the file (line numbers from 1)."""
    groups, stack = [], []
    for number, line in enumerate(lines, 1):
        directive = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if not directive:
            continue
        kind, rest = directive.group(1), directive.group(2).strip()
        if kind in ("if", "ifdef", "ifndef"):
            group = Group(number, f"#{kind} {rest}")
            groups.append(group)
            stack.append(group)
        elif kind in ("elif", "else") and stack:
            stack[-1].branches.append((number, f"#{kind} {rest}"))
        elif kind == "endif" and stack:
            stack.pop().end = number
    return groups


def guarded(line, groups):
    """True when `line` sits in a branch conditioned on Linux of a group that has another branch."""
    for group in groups:
        start, end = group.branches[0][0], group.end or float("inf")
        if not start < line < end:
            continue
        if len(group.branches) > 1 and linux_branch(group, group.branch_at(line)):
            return True
    return False


def linux_branch(group, condition):
    """True for `#ifdef __linux__`-like branches, and for the #else of `#ifndef __linux__`-like groups."""
    if LINUX_MACRO.search(condition):
        return not NEGATED_LINUX.search(condition)
    first = group.branches[0][1]
    return condition.startswith("#else") and len(group.branches) == 2 and bool(NEGATED_LINUX.search(first)) and \
        bool(LINUX_MACRO.search(first))


def check_build_file(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    return [f"{path}:{number}: '{match.group(0)}' builds for this machine's CPU only (other CPUs and universal macOS "
            "builds fail): leave the instruction set to the compiler's default"
            for number, line in enumerate(lines, 1) if not line.lstrip().startswith("#")
            for match in NATIVE_FLAGS.finditer(line)]


def check_file(path):
    if path.endswith(BUILD_FILE_SUFFIXES):
        return check_build_file(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_comments(f.read())
    lines = text.split("\n")
    groups = preprocessor_groups(lines)
    problems = []
    for number, line in enumerate(lines, 1):
        for pattern, what in LINUX_ONLY:
            for match in re.finditer(pattern, line):
                if not guarded(number, groups):
                    problems.append(f"{path}:{number}: '{match.group(0).rstrip('( ')}' is Linux-only ({what}): put it "
                                    "under #ifdef __linux__ with an #else branch that works elsewhere")
    return problems


def source_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for folder, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES + BUILD_FILE_SUFFIXES):
                    yield os.path.join(folder, name)


def main(argv):
    if not argv:
        print(__doc__.strip())
        return 2
    problems = []
    for path in source_files(argv):
        problems.extend(check_file(path))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} Linux-only uses without a platform guard and a fallback")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
