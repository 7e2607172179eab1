#!/usr/bin/env bash
# Run here (Debian): gathers what the GPU machine lacks into .gpu/ (git-ignored), to be carried there:
# Debian .deb packages of the libraries (unpacked there under /tmp/deps, never into /), and the real Gemma 3,
# Qwen 3 and Llama 3 tokenizers for the benchmarks. See scripts/gpu/build.sh and ../shared/bench/GPU_BUILD.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu/debs
packages=(libhdf5-dev libhdf5-103-1 libhdf5-cpp-103-1 libhdf5-hl-100 libhdf5-hl-cpp-100 libsz2 libaec0 libaec-dev
          libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 doctest-dev nlohmann-json3-dev
          libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libsimdjson-dev libsimdjson14
          # libcurl for the hub client, with the runtime libraries of Debian's build that Ubuntu 24.04 lacks
          # (apt-cache depends libcurl4: libldap-2.5-0 and libssh2-1 there; the rest has the same sonames),
          # and cpp-httplib for probe_server and the tests (its runtime dependencies are all on Ubuntu; the headers of
          # OpenSSL, zlib and Brotli, which its feature macros include, are carried).
          libcurl4-openssl-dev libcurl4 libldap-2.5-0 libssh2-1 libcpp-httplib-dev libcpp-httplib0.11
          libssl-dev zlib1g-dev libbrotli-dev
          # pybind11's headers and CMake files, for the Python package's extension module (the python_api benchmark)
          pybind11-dev)
if [ "$(ls .gpu/debs/*.deb 2>/dev/null | wc -l)" -lt "${#packages[@]}" ]; then
  (cd .gpu/debs && apt-get download "${packages[@]}")
fi
for name in gemma3 qwen3 llama3; do
  if [ ! -s .gpu/${name}_tokenizer.json.gz ]; then
    bash scripts/fetch_tokenizers.sh
    gzip -9 -c .cache/tokenizers/$name/tokenizer.json > .gpu/${name}_tokenizer.json.gz
  fi
done
du -sh .gpu
