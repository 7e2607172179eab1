// Starts CUDA's driver beside LibTorch's start-up, for the tools' executables of a CUDA build (tools/CMakeLists.txt
// compiles this file into each; a shared library may not have a .preinit_array, so the Python module has none).
//
// A whole-process run (multi_probe_inference --text) spends half a second in LibTorch's static initializers before
// main, then a quarter of a second starting the driver (cuInit) and making each GPU's primary context, which the
// first device query (device::query_runtime) waits for. An executable's .preinit_array runs before any shared
// library's initializer: a thread started there starts the driver and retains the contexts while LibTorch
// initializes, and the runtime then finds them made. The driver is opened, not linked, so a machine without one
// starts as before; the contexts are those the device query would make anyway (it reads every GPU's free memory).
#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>

namespace {

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
// unloading the driver under it.
void join_driver_thread() {
  if (driver_thread_started) pthread_join(driver_thread, nullptr);
}

void start_driver_thread(int, char**, char**) {
  driver_thread_started = pthread_create(&driver_thread, nullptr, start_driver, nullptr) == 0;
  if (driver_thread_started) std::atexit(join_driver_thread);
}

__attribute__((section(".preinit_array"), used)) void (*const start_driver_at_preinit)(int, char**, char**) =
    start_driver_thread;

}  // namespace
