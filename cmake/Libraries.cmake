# probekit_library(<name> [RECURSE] [TORCH] [DEPENDS <libraries>...] [SOURCES <extra files>...]): the static library
# probekit_<name> made of the .cpp files of the folder whose CMakeLists.txt calls it (with RECURSE, of its subfolders
# too). A new file in a folder joins that folder's library; a new folder is one CMakeLists.txt and one line in the
# top-level list. TORCH marks the libraries that run LibTorch: they share one precompiled <ATen/ATen.h>.
function(probekit_library name)
  cmake_parse_arguments(arg "RECURSE;TORCH" "" "DEPENDS;SOURCES" ${ARGN})
  if(arg_RECURSE)
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  else()
    file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  endif()
  set(target probekit_${name})
  add_library(${target} STATIC ${sources} ${arg_SOURCES})
  target_link_libraries(${target} PUBLIC ${arg_DEPENDS})
  if(arg_TORCH)
    target_link_libraries(${target} PUBLIC probekit::torch)
    if(name STREQUAL "device_torch")
      target_precompile_headers(${target} PRIVATE <ATen/ATen.h>)
    else()
      target_precompile_headers(${target} REUSE_FROM probekit_device_torch)
    endif()
  endif()
endfunction()

# The precompiled LibTorch header of the libraries, for a tool, test or benchmark executable.
function(probekit_reuse_torch_header target)
  target_precompile_headers(${target} REUSE_FROM probekit_device_torch)
  # With the Python module the libraries (and their header) are compiled -fPIC; an executable would be -fPIE, which
  # makes GCC refuse the header: compiled -fPIC too (PIC code links into a PIE executable).
  if(CMAKE_POSITION_INDEPENDENT_CODE)
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()

# probekit_tool_start(<executable> [SPINNING_OPENMP]): what a tool or benchmark does before any library initializes
# (tools/start/tool_start.cpp): sleeping idle OpenMP threads unless SPINNING_OPENMP, and in a CUDA build the driver
# started beside LibTorch's initializers.
function(probekit_tool_start target)
  cmake_parse_arguments(arg "SPINNING_OPENMP" "" "" ${ARGN})
  set(source ${PROJECT_SOURCE_DIR}/tools/start/tool_start.cpp)
  set_source_files_properties(${source} PROPERTIES SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
  target_sources(${target} PRIVATE ${source})
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  if(arg_SPINNING_OPENMP)
    target_compile_definitions(${target} PRIVATE PROBEKIT_SPINNING_OPENMP=1)
  endif()
endfunction()
