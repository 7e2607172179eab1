#!/usr/bin/env python3
"""scripts/setup.sh's macOS dry run, on Linux: the Homebrew packages and CMake hints it prints for both LibTorch
sources, with a stand-in `brew` (its prefix; it logs how it was called) and `python3` (a pip torch) on PATH.

Usage: test_setup_dry_run.py SOURCE_ROOT
"""
import os
import stat
import subprocess
import sys
import tempfile

root = sys.argv[1]
failures = []

# What Debian's packages give, as Homebrew formulae (the list), and libomp for AppleClang's OpenMP.
REQUIRED = ["hdf5", "cli11", "spdlog", "doctest", "nlohmann-json", "pcre2", "utf8proc", "simdjson", "libomp", "fmt"]


def write_tool(folder, name, body):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(args, fake_bin, extra_env=None):
    env = dict(os.environ, PATH=fake_bin + os.pathsep + os.environ["PATH"])
    env.pop("PROBEKIT_LIBTORCH", None)
    env.pop("PROBEKIT_SETUP_DRY_RUN", None)
    env.update(extra_env or {})
    result = subprocess.run(["bash", f"{root}/scripts/setup.sh"] + args, capture_output=True, text=True, env=env)
    return result.returncode, result.stdout, result.stderr


def check(condition, what, output):
    if not condition:
        failures.append(f"{what}\n--- output:\n{output}")


def field(output, prefix):
    for line in output.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return ""


with tempfile.TemporaryDirectory() as scratch:
    fake_bin = os.path.join(scratch, "bin")
    os.mkdir(fake_bin)
    brew_log = os.path.join(scratch, "brew.log")
    prefix = "/fake/homebrew"
    write_tool(fake_bin, "brew", f'echo "$@" >> {brew_log}\n[ "$1" = --prefix ] && echo {prefix}\nexit 0\n')
    site = "/fake/venv/lib/python3.12/site-packages"
    write_tool(fake_bin, "python3", f'echo {site}/torch/share/cmake\n')

    # Homebrew's pytorch (the default), through the argument and through the variable.
    code, out, err = run(["--dry-run", "--platform", "macos"], fake_bin)
    check(code == 0, f"homebrew dry run: exit code {code}, stderr {err}", out)
    _, same, _ = run([], fake_bin, {"PROBEKIT_SETUP_DRY_RUN": "macos"})
    check(same == out, "PROBEKIT_SETUP_DRY_RUN=macos prints what --dry-run --platform macos prints", same)
    packages = field(out, "brew install:").split()
    for package in REQUIRED + ["pytorch"]:
        check(package in packages, f"homebrew dry run: {package} missing from the packages", out)
    check(field(out, "libtorch:").startswith("homebrew"), "homebrew dry run: libtorch line", out)
    for hint in [f"-DCMAKE_PREFIX_PATH={prefix}/opt/pytorch/share/cmake;{prefix}",
                 f"-DOpenMP_omp_LIBRARY={prefix}/opt/libomp/lib/libomp.dylib",
                 f"-DOpenMP_CXX_FLAGS=-Xpreprocessor -fopenmp -I{prefix}/opt/libomp/include",
                 "-DOpenMP_CXX_LIB_NAMES=omp",
                 f"-DFMT_FIRST={prefix}/opt/fmt/include",
                 f"-DHDF5_ROOT={prefix}/opt/hdf5"]:
        check(f"  {hint}\n" in out, f"homebrew dry run: hint {hint} missing", out)

    # A pip torch: its cmake_prefix_path, its own libomp, and no pytorch formula.
    code, out, err = run(["--dry-run", "--platform", "macos"], fake_bin, {"PROBEKIT_LIBTORCH": "pip"})
    check(code == 0, f"pip dry run: exit code {code}, stderr {err}", out)
    packages = field(out, "brew install:").split()
    check("pytorch" not in packages, "pip dry run: installs Homebrew's pytorch too", out)
    for package in REQUIRED:
        check(package in packages, f"pip dry run: {package} missing from the packages", out)
    check(f"  -DCMAKE_PREFIX_PATH={site}/torch/share/cmake;{prefix}\n" in out, "pip dry run: torch's prefix", out)
    check(f"  -DOpenMP_omp_LIBRARY={site}/torch/lib/libomp.dylib\n" in out, "pip dry run: torch's own libomp", out)
    check(f"{prefix}/opt/libomp/lib" not in out, "pip dry run: links Homebrew's libomp beside torch's", out)
    check(f"  -DFMT_FIRST={prefix}/opt/fmt/include\n" in out, "pip dry run: FMT_FIRST", out)

    # A dry run asks brew only for its prefix: nothing installed.
    with open(brew_log) as f:
        calls = f.read().split("\n")
    check(all(call in ("--prefix", "") for call in calls), f"brew called with more than --prefix: {calls}", "")

    # No torch in python3: an error naming the interpreter and what to do.
    write_tool(fake_bin, "python3", "exit 1\n")
    code, out, err = run(["--dry-run", "--platform", "macos"], fake_bin, {"PROBEKIT_LIBTORCH": "pip"})
    check(code == 1 and "cannot import torch" in err and "PROBEKIT_PYTHON" in err,
          f"pip without torch: exit code {code}, stderr {err}", out)
    code, out, err = run(["--dry-run", "--platform", "windows"], fake_bin)
    check(code == 2 and "unknown platform windows" in err, f"unknown platform: exit code {code}, stderr {err}", out)

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
