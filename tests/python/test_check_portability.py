#!/usr/bin/env python3
"""scripts/check_portability.py on its fixtures: every unguarded Linux-only use is reported at its line, and
guarded uses with a fallback (and mentions in comments) are not; -march=native in a build file is reported.

Usage: test_check_portability.py SOURCE_ROOT
"""
import subprocess
import sys

root = sys.argv[1]
script = f"{root}/scripts/check_portability.py"
fixtures = f"{root}/tests/fixtures/portability"


def run(path):
    result = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    return result.returncode, result.stdout


code, out = run(f"{fixtures}/unguarded.cpp")
reported = sorted((line.split(":")[1], line.split("'")[1]) for line in out.splitlines() if "Linux-only (" in line)
# Line 5 has no guard; lines 9-10 have a guard but no fallback; line 15 is the branch for systems other than Linux;
# line 17 (the #else of #ifndef __linux__) is guarded; line 20 has no guard.
expected = sorted([("5", "O_DIRECT"), ("9", "cpu_set_t"), ("10", "sched_getaffinity"), ("15", '"/proc/'),
                   ("20", "posix_fadvise")])
failures = []
if code != 1:
    failures.append(f"unguarded.cpp: exit code {code}, expected 1")
if reported != expected:
    failures.append(f"unguarded.cpp: reported {reported}\n  expected {expected}\n  output:\n{out}")
code, out = run(f"{fixtures}/native.cmake")
if code != 1 or f"{fixtures}/native.cmake:3: '-march=native' builds for this machine's CPU only" not in out:
    failures.append(f"native.cmake: exit code {code}, expected 1 and line 3 reported; output:\n{out}")
code, out = run(f"{fixtures}/guarded.cpp")
if code != 0 or out:
    failures.append(f"guarded.cpp: exit code {code}, expected 0 and no output; output:\n{out}")
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
