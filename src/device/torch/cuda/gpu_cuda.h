// CUDA-runtime queries, compiled only against a CUDA build of LibTorch (PROBEKIT_WITH_CUDA).
#pragma once

#include <memory>
#include <vector>

#include "device/device_select.h"

namespace probekit::device::cuda {

std::vector<GpuInfo> query_devices();
/// The compute capability's major number of a CUDA device (index -1: the current one); 0 where it cannot be read.
int capability_major(int index);
uint64_t free_memory(int index);
void synchronize(int index);
void empty_cache();
/// Makes a stream from LibTorch's pool current on each device until the returned guard is destroyed.
std::shared_ptr<void> use_pool_streams(const std::vector<int>& indices);

}  // namespace probekit::device::cuda
