// Runs a benchmark's body under LibTorch's Kineto profiler and writes a Chrome trace of every CPU op and GPU
// kernel (bench/python/summarize_trace.py reads it). Needs LibTorch 2.x (Kineto).
#pragma once

#include <torch/version.h>

#include <functional>
#include <set>
#include <string>

#include "common/error.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace probekit::bench {

#if TORCH_VERSION_MAJOR >= 2
inline void profile(const std::function<void()>& body, const std::string& trace) {
  namespace profiler = torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU,
                                                           torch::profiler::impl::ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  try {
    body();
  } catch (...) {
    profiler::disableProfiler();  // the profiler must be stopped before the process ends
    throw;
  }
  profiler::disableProfiler()->save(trace);
}
#else
inline void profile(const std::function<void()>&, const std::string&) {
  throw UsageError("profiling needs LibTorch 2.x (Kineto); this build has " TORCH_VERSION);
}
#endif

}  // namespace probekit::bench
