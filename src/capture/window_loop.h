// The window loop of a capture run: every worker (a model copy, or a pipeline stage of a split one) takes the next
// batch of the oldest window that has one left, its rows come down to the host behind its kernels and are checked
// and stored on a thread of their own, and each finished window goes, in run order, to the background writer
// while later ones compute.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "capture/batch_runner.h"
#include "capture/outputs.h"
#include "capture/plan.h"

namespace probekit::capture {

/// Runs the examples from run position `start` on `runners` (`replicas` model copies) and writes them into
/// `outputs`, filling the summary's counts and times.
void run_windows(const CaptureOptions& options, const CapturePlan& plan,
                 const std::vector<device::ComputeTarget>& targets, std::vector<BatchRunner> runners, size_t replicas,
                 std::vector<LayerOutput>& outputs, const std::array<activations::SplitLayout, 3>& layouts,
                 const Batching& batching, int64_t start, CaptureSummary& summary);

}  // namespace probekit::capture
