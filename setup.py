"""Builds the package's extension module, probekit._native, with the project's CMake and installs it beside the
Python files of python/probekit. An existing build tree is reused (build/, or $PROBEKIT_BUILD_DIR): only the module
is compiled when the libraries are there. LibTorch is the installed torch's: Debian's libtorch-dev (found on CMake's
system path) or a pip torch's own (torch.utils.cmake_prefix_path)."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
EXAMPLE_DATA = ["data/example_tokenizer.json", "data/example.jsonl"]


def cmake_configure_arguments(build_dir):
    arguments = ["cmake", "-S", ROOT, "-B", build_dir, "-DPROBEKIT_BUILD_PYTHON=ON",
                 f"-DPython3_EXECUTABLE={sys.executable}"]
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        arguments += ["-DCMAKE_BUILD_TYPE=Release", "-DPROBEKIT_BUILD_TESTS=OFF"]
        if shutil.which("ninja"):
            arguments += ["-G", "Ninja"]
    import torch.utils
    torch_cmake = getattr(torch.utils, "cmake_prefix_path", "")
    if torch_cmake and os.path.isdir(os.path.join(torch_cmake, "Torch")):
        arguments.append(f"-DCMAKE_PREFIX_PATH={torch_cmake}")
    return arguments + os.environ.get("PROBEKIT_CMAKE_ARGS", "").split()


class BuildWithCMake(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("PROBEKIT_BUILD_DIR") or os.path.join(ROOT, "build")
        subprocess.check_call(cmake_configure_arguments(build_dir))
        jobs = os.environ.get("PROBEKIT_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_native", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "probekit", "_native*.so"))
        if not built:
            raise RuntimeError(f"the build left no _native module under {build_dir}/python/probekit")
        destination = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copyfile(built[0], destination)


class BuildWithExampleData(build_py):
    """The package's files plus the built-in example's tokenizer and dataset (probekit/data)."""

    def run(self):
        super().run()
        data_dir = os.path.join(self.build_lib, "probekit", "data")
        os.makedirs(data_dir, exist_ok=True)
        for name in EXAMPLE_DATA:
            shutil.copyfile(os.path.join(ROOT, name), os.path.join(data_dir, os.path.basename(name)))


setup(
    packages=["probekit"],
    package_dir={"": "python"},
    package_data={"probekit": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("probekit._native", sources=[])],
    cmdclass={"build_ext": BuildWithCMake, "build_py": BuildWithExampleData},
    options={"build": {"build_base": os.path.join("build", "setuptools")}},
    zip_safe=False,
)
