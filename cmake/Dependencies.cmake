# Finds every dependency and exposes the few that lack CMake targets as probekit::* interface targets.
# Locally they come from Debian's packages; on the GPU machine from torch's LibTorch plus Debian packages
# unpacked under a prefix named in CMAKE_PREFIX_PATH (see scripts/gpu_build.sh).

# torch 2.x ships fmt 12 headers in its include directory, which spdlog (built for fmt 9) must not see first.
set(FMT_FIRST "" CACHE PATH "Directory holding fmt 9's fmt/ headers, searched before LibTorch's")
if(FMT_FIRST)
  include_directories(BEFORE SYSTEM ${FMT_FIRST})
endif()

find_package(Torch REQUIRED)
add_library(probekit_torch INTERFACE)
target_link_libraries(probekit_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(probekit_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
add_library(probekit::torch ALIAS probekit_torch)
if(TORCH_CXX_FLAGS)
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(probekit_torch INTERFACE ${_torch_flags})
endif()
# A CUDA or ROCm build of LibTorch links torch_cuda / torch_hip; the CPU build of Debian has neither.
if(TARGET torch_cuda OR "${TORCH_LIBRARIES}" MATCHES "torch_cuda")
  set(PROBEKIT_WITH_CUDA ON)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(probekit_torch INTERFACE CUDA::cudart)
  target_compile_definitions(probekit_torch INTERFACE PROBEKIT_WITH_CUDA=1)
else()
  set(PROBEKIT_WITH_CUDA OFF)
endif()
if("${TORCH_LIBRARIES}" MATCHES "torch_hip")
  target_compile_definitions(probekit_torch INTERFACE PROBEKIT_WITH_ROCM=1)
endif()
message(STATUS "probekit: LibTorch ${Torch_VERSION}, CUDA support ${PROBEKIT_WITH_CUDA}")

find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(simdjson REQUIRED)
# The hub client downloads with libcurl (Debian: libcurl4-openssl-dev).
find_package(CURL REQUIRED)
# zlib inflates the members of compressed .npz archives (io/npz.cpp).
find_package(ZLIB REQUIRED)

find_package(HDF5 REQUIRED COMPONENTS C)
add_library(probekit_hdf5 INTERFACE)
target_include_directories(probekit_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(probekit_hdf5 INTERFACE ${HDF5_C_LIBRARIES} ${HDF5_LIBRARIES})
target_compile_definitions(probekit_hdf5 INTERFACE ${HDF5_DEFINITIONS} H5_USE_110_API)
add_library(probekit::hdf5 ALIAS probekit_hdf5)

# PCRE2 and utf8proc ship pkg-config files whose prefix is /usr, wrong once unpacked elsewhere: search directly.
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY NAMES pcre2-8 REQUIRED)
add_library(probekit_pcre2 INTERFACE)
target_include_directories(probekit_pcre2 SYSTEM INTERFACE ${PCRE2_INCLUDE_DIR})
target_link_libraries(probekit_pcre2 INTERFACE ${PCRE2_LIBRARY})
target_compile_definitions(probekit_pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)
add_library(probekit::pcre2 ALIAS probekit_pcre2)

find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
find_library(UTF8PROC_LIBRARY NAMES utf8proc REQUIRED)
add_library(probekit_utf8proc INTERFACE)
target_include_directories(probekit_utf8proc SYSTEM INTERFACE ${UTF8PROC_INCLUDE_DIR})
target_link_libraries(probekit_utf8proc INTERFACE ${UTF8PROC_LIBRARY})
add_library(probekit::utf8proc ALIAS probekit_utf8proc)

# cpp-httplib serves probe_server's HTTP API and the tests' mock hub, and is the tests' HTTP client. Debian's
# (libcpp-httplib-dev) is a compiled library and its header, Homebrew's the header alone (compiled into each user).
# A compiled library's classes' layout depends on the feature macros it was built with (Debian's: OpenSSL, zlib and
# Brotli, as its cpp-httplib.pc says), so they are defined here as well; the package depends on those libraries'
# -dev packages, whose headers the macros include. The header alone needs none of them.
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
find_library(HTTPLIB_LIBRARY NAMES cpp-httplib)
find_package(Threads REQUIRED)
add_library(probekit_httplib INTERFACE)
target_include_directories(probekit_httplib SYSTEM INTERFACE ${HTTPLIB_INCLUDE_DIR})
target_link_libraries(probekit_httplib INTERFACE Threads::Threads)
if(HTTPLIB_LIBRARY)
  target_link_libraries(probekit_httplib INTERFACE ${HTTPLIB_LIBRARY})
  find_path(HTTPLIB_OPENSSL_INCLUDE openssl/ssl.h)
  find_path(HTTPLIB_OPENSSL_CONF_INCLUDE openssl/opensslconf.h)  # Debian keeps it in the multiarch include folder
  find_path(HTTPLIB_ZLIB_INCLUDE zlib.h)
  find_path(HTTPLIB_BROTLI_INCLUDE brotli/decode.h)
  if(HTTPLIB_OPENSSL_INCLUDE AND HTTPLIB_OPENSSL_CONF_INCLUDE AND HTTPLIB_ZLIB_INCLUDE AND HTTPLIB_BROTLI_INCLUDE)
    target_include_directories(probekit_httplib SYSTEM INTERFACE ${HTTPLIB_OPENSSL_INCLUDE}
                               ${HTTPLIB_OPENSSL_CONF_INCLUDE} ${HTTPLIB_ZLIB_INCLUDE} ${HTTPLIB_BROTLI_INCLUDE})
    target_compile_definitions(probekit_httplib INTERFACE
      CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
  else()
    message(WARNING "cpp-httplib: the OpenSSL, zlib or Brotli headers are missing (apt-get install libcpp-httplib-dev "
                    "pulls them in); built without the feature macros, which must match those of ${HTTPLIB_LIBRARY}")
  endif()
endif()
add_library(probekit::httplib ALIAS probekit_httplib)
