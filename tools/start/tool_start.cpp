// What a tool's executable does before any library initializes: compiled into each tool and benchmark
// (probekit_tool_start in cmake/Libraries.cmake). An executable's .preinit_array runs after the libraries are loaded
// and before any of their initializers, LibTorch's half second of static initializers and OpenMP's reading of its
// environment among them; a shared library may not have one, so the Python module has none of this.
//
// 1. Idle OpenMP threads sleep rather than spin, unless the user chose a policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT) or
//    the executable was built to spin (PROBEKIT_SPINNING_OPENMP: the trainers, whose parallel regions follow each
//    other closely). Spinning threads of LibTorch's and OpenBLAS's pools take whole cores from the threads doing the
//    work whenever cores are few or shared, which made small models run 5x slower on 2 cores. OpenMP reads the policy
//    once, when it initializes, so the program re-executes itself with OMP_WAIT_POLICY=PASSIVE, from here, before
//    LibTorch's initializers have run: the restart costs the libraries' loading only, not a second initialization.
//    (The environment cannot be changed in place here: the C library sets it up after this runs.)
// 2. In a CUDA build, a thread starts CUDA's driver (cuInit) and retains each GPU's primary context while LibTorch
//    initializes; the first device query (device::query_runtime, which reads every GPU's free memory) waited a
//    quarter of a second for them after LibTorch's start-up. The driver is opened, not linked, so a machine without
//    one starts as before.
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef __APPLE__
#include <crt_externs.h>
#include <mach-o/dyld.h>
#endif

namespace {

#ifndef PROBEKIT_SPINNING_OPENMP
void restart_with_sleeping_openmp_threads(char** argv, char** environment) {
  char** end = environment;
  for (; *end != nullptr; ++end) {
    if (std::strncmp(*end, "OMP_WAIT_POLICY=", 16) == 0 || std::strncmp(*end, "GOMP_SPINCOUNT=", 15) == 0) return;
  }
  static char passive[] = "OMP_WAIT_POLICY=PASSIVE";
  std::vector<char*> restarted(environment, end);
  restarted.push_back(passive);
  restarted.push_back(nullptr);
#if defined(__linux__)
  ::execve("/proc/self/exe", argv, restarted.data());
#elif defined(__APPLE__)
  static char executable[4096];
  auto size = static_cast<uint32_t>(sizeof executable);
  if (_NSGetExecutablePath(executable, &size) == 0) ::execve(executable, argv, restarted.data());
#endif
  // Where re-executing is not possible the program goes on with spinning threads.
}
#endif

#ifdef PROBEKIT_WITH_CUDA
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDevicePrimaryCtxRetain = int (*)(void**, int);

pthread_t driver_thread;
bool driver_thread_started = false;

void* start_driver(void*) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return nullptr;
  auto init = reinterpret_cast<CuInit>(dlsym(driver, "cuInit"));
  auto count_devices = reinterpret_cast<CuDeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
  auto get_device = reinterpret_cast<CuDeviceGet>(dlsym(driver, "cuDeviceGet"));
  auto retain_context = reinterpret_cast<CuDevicePrimaryCtxRetain>(dlsym(driver, "cuDevicePrimaryCtxRetain"));
  if (init == nullptr || count_devices == nullptr || get_device == nullptr || retain_context == nullptr) return nullptr;
  int count = 0;
  if (init(0) != 0 || count_devices(&count) != 0) return nullptr;
  // Retained for the process's life (its end releases them): the runtime's own retain then finds each one made.
  for (int index = 0; index < count; ++index) {
    int device = 0;
    void* context = nullptr;
    if (get_device(&device, index) == 0) retain_context(&context, device);
  }
  return nullptr;
}

// Registered before any library's exit handlers, so it runs after theirs and before the libraries' destructors (the
// driver's among them): a tool that ends within the driver's start (--help) waits for the thread rather than
// unloading the driver under it. (Tools ending through TorchTool::run skip exit's handlers: nothing is unloaded.)
void join_driver_thread() {
  if (driver_thread_started) pthread_join(driver_thread, nullptr);
}

void start_driver_thread() {
  driver_thread_started = pthread_create(&driver_thread, nullptr, start_driver, nullptr) == 0;
  if (driver_thread_started) std::atexit(join_driver_thread);
}
#endif

void start_tool(int, char** argv, char** environment) {
#ifndef PROBEKIT_SPINNING_OPENMP
  restart_with_sleeping_openmp_threads(argv, environment);
#else
  (void)argv, (void)environment;
#endif
#ifdef PROBEKIT_WITH_CUDA
  start_driver_thread();
#endif
}

#ifdef __APPLE__
// Mach-O has no .preinit_array: a constructor of the executable, which runs after the libraries' (unverified: no Mac
// was available), restarts the program before main as the Linux build does.
__attribute__((constructor)) void start_tool_at_load() { start_tool(*_NSGetArgc(), *_NSGetArgv(), *_NSGetEnviron()); }
#else
__attribute__((section(".preinit_array"), used)) void (*const start_tool_at_preinit)(int, char**, char**) = start_tool;
#endif

}  // namespace
