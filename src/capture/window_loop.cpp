#include "capture/window_loop.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <set>

#include "capture/window_queue.h"
#include "common/background_worker.h"
#include "common/error.h"
#include "common/progress.h"
#include "device/torch/gpu_utils.h"
#include "device/torch/transfers.h"
#include "readout/readout.h"

namespace probekit::capture {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Copies a batch's rows [rows, layers, width] into the window's per-layer buffers; returns the batch's tokens.
int64_t store_rows(WindowRows& window, const std::vector<int64_t>& batch, const at::Tensor& result,
                   const CapturePlan& plan, Position position) {
  const int64_t width = plan.width;
  const float* data = result.data_ptr<float>();
  const auto layer_count = static_cast<int64_t>(plan.layers.size());
  int64_t result_row = 0, tokens = 0;
  for (int64_t p : batch) {
    int64_t count = plan.rows_of(static_cast<size_t>(p), position);
    int64_t target_row = window.row_start[static_cast<size_t>(p - window.begin)];
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t l = 0; l < layer_count; ++l) {
        std::memcpy(window.per_layer[static_cast<size_t>(l)].get() + (target_row + r) * width,
                    data + ((result_row + r) * layer_count + l) * width, static_cast<size_t>(width) * sizeof(float));
      }
    }
    result_row += count;
    tokens += plan.lengths[static_cast<size_t>(p)];
  }
  return tokens;
}

// NaN or infinite rows (NaN/Inf weights, a config value such as query_pre_attn_scalar: 0) stop the run at the
// first batch that shows them, naming the example and the layer, before anything is written. A plain loop rather
// than ATen's: it runs on the storing thread beside the worker's kernel launches, and ATen's OpenMP team would
// spin on every core.
void check_finite(const at::Tensor& rows, const std::vector<int64_t>& batch, const CapturePlan& plan, Position position) {
  const float* data = rows.data_ptr<float>();
  const float* end = data + rows.numel();
  const float* bad = std::find_if(data, end, [](float x) { return !std::isfinite(x); });
  if (bad == end) return;
  auto layer_count = static_cast<int64_t>(plan.layers.size());
  int64_t row = (bad - data) / (layer_count * plan.width), slot = (bad - data) / plan.width % layer_count;
  int64_t first_row = 0;
  for (int64_t p : batch) {
    int64_t count = plan.rows_of(static_cast<size_t>(p), position);
    if (row < first_row + count) {
      const data::Example& example = plan.dataset.examples[static_cast<size_t>(plan.run[static_cast<size_t>(p)].example)];
      fail_input("{}:{}: {}", plan.dataset.path, example.line + 1,
                 readout::non_finite_message(
                     fmt::format("the activations of layer {} are", plan.layers[static_cast<size_t>(slot)])));
    }
    first_row += count;
  }
}

// The host memory the rows of window [begin, end) take, as make_window allocates them (floats).
double window_row_bytes(const CapturePlan& plan, int64_t begin, int64_t end, Position position) {
  int64_t rows = 0;
  for (int64_t p = begin; p < end; ++p) rows += plan.rows_of(static_cast<size_t>(p), position);
  const auto layers = static_cast<double>(plan.layers.size());
  return static_cast<double>(rows) * static_cast<double>(plan.width) * layers * sizeof(float);
}

std::shared_ptr<WindowRows> make_window(const CapturePlan& plan, int64_t begin, int64_t end, Position position) {
  auto window = std::make_shared<WindowRows>();
  window->begin = begin;
  window->end = end;
  int64_t rows = 0;
  for (int64_t p = begin; p < end; ++p) {
    window->row_start.push_back(rows);
    rows += plan.rows_of(static_cast<size_t>(p), position);
  }
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    window->per_layer.emplace_back(new float[static_cast<size_t>(rows * plan.width)]);
  }
  return window;
}

// The window loop of a run: every worker (a replica, or a pipeline stage of a split one) takes the next batch,
// of the oldest window that has one left, or of the next window (batches fill disjoint rows); each finished
// window goes, in run order, to the background writer while later ones compute.
class WindowLoop {
 public:
  WindowLoop(const CaptureOptions& options, const CapturePlan& plan, const std::vector<device::ComputeTarget>& targets,
             std::vector<BatchRunner> runners, size_t replicas, CaptureSummary& summary)
      : options_(options), plan_(plan), targets_(targets), runners_(std::move(runners)), replicas_(replicas),
        summary_(summary) {}

  void run(std::vector<LayerOutput>& outputs, const std::array<activations::SplitLayout, 3>& layouts,
           const Batching& batching, int64_t start) {
    auto run_size = static_cast<int64_t>(plan_.run.size());
    BackgroundWorker writer(1, targets_.front().is_gpu());
    // A resumed run whose files hold every example already (killed between two layers' finish()) has no batch to
    // warm up on, nor any to run: its files are only finished.
    if (targets_.front().is_gpu() && start < run_size) {
      auto warm_up_start = Clock::now();
      reserve_row_buffers(batching);
      warm_up(plan_window_batches(plan_.lengths, start, std::min(start + batching.window, run_size), batching).front());
      summary_.warm_up_seconds = seconds_since(warm_up_start);
      spdlog::debug("devices warmed up on the first batch in {:.2f} s", summary_.warm_up_seconds);
    }
    ProgressBar progress("capture", run_size - start, "examples");
    RECORD_FUNCTION("capture loop", std::vector<c10::IValue>());  // where a profile's timed part begins
    start_ = Clock::now();
    // A worker takes the next window's first batches while the last batches of the window before are still
    // computing or being stored (windows_open).
    const double window_bytes =
        window_row_bytes(plan_, start, std::min(start + batching.window, run_size), options_.position);
    const size_t open = windows_open(runners_.size(), window_bytes,
                                     static_cast<double>(device::memory_for_tensors(at::Device(at::kCPU))));
    spdlog::debug("{} windows open at most, {:.2f} GB of rows each", open, window_bytes / 1e9);
    WindowQueue queue(start, run_size, batching.window, open, [&](int64_t begin, int64_t end) {
      auto batches = plan_window_batches(plan_.lengths, begin, end, batching);
      // The run's last batches in quarters when replicas share it (with_finer_tail); a single model, split or not,
      // keeps the batches of a one-device run.
      if (replicas_ > 1 && end == run_size) batches = with_finer_tail(std::move(batches), 2 * runners_.size(), 4);
      return WindowWork{make_window(plan_, begin, end, options_.position), std::move(batches)};
    });
    auto write = [&](std::shared_ptr<WindowRows> window) {
      writer.submit([&outputs, window, &layouts, this] {
        auto write_start = Clock::now();
        write_window(outputs, *window, plan_.run, layouts, options_.position, plan_.width);
        spdlog::debug("examples {}-{} written in {:.3f} s, {:.2f} s into the capture", window->begin, window->end,
                      seconds_since(write_start), seconds_since(start_));
      });
    };
    if (runners_.size() == 1) {
      work(0, queue, write, progress);
    } else {
      std::vector<std::future<void>> workers;
      for (size_t r = 0; r < runners_.size(); ++r) {
        workers.push_back(std::async(std::launch::async, [&, r] { work(r, queue, write, progress); }));
      }
      for (auto& worker : workers) worker.get();
    }
    writer.wait();
    for (LayerOutput& out : outputs) {
      if (out.writer) out.writer->finish();
    }
    summary_.capture_seconds = seconds_since(start_);
    summary_.out_of_memory_retries = retries_;
    progress.finish();
  }

 private:
  using Write = std::function<void(std::shared_ptr<WindowRows>)>;

  // One worker's loop: batches from the queue until none is left; a failure stops the others too. The worker
  // only queues batches: their rows are copied to the host behind each batch's kernels and checked and stored on
  // a thread of its own. Storing them here kept it from queueing the next batch while the GPU ran out of work
  // (the launch queue holds a fraction of a batch): up to 90 ms a batch with all 34 layers, 13% of the capture.
  // It keeps at most two batches on its devices: one that ran further ahead would hold batches at the end of the
  // run that other replicas could take (measured: one of two GPUs idle for the last 0.25 s of 2.5).
  void work(size_t runner, WindowQueue& queue, const Write& write, ProgressBar& progress) {
    device::WorkerStreams streams(runners_[runner].devices());
    device::OutOfMemoryRetry retry = out_of_memory_retry(runners_[runner]);
    BackgroundWorker storer(1, /*in_background=*/true);  // on the CPU too, where the tests reach it
    try {
      std::shared_ptr<const device::HostCopy> previous;
      while (std::optional<WindowQueue::Task> task = queue.next(/*wait=*/true)) {
        auto rows =
            std::make_shared<const device::HostCopy>(runners_[runner].run(*task->batch, plan_, retry), &row_buffers_);
        storer.submit([this, task = *task, rows, runner, &queue, &write, &progress] {
          try {
            store_batch(task, rows->wait(), runners_[runner], queue, write, progress);
          } catch (const std::exception&) {
            queue.abort();  // this batch's window never completes: free a worker waiting for it
            throw;
          }
        });
        if (previous) previous->wait();
        previous = rows;
      }
      storer.wait();
    } catch (const std::exception&) {
      queue.abort();
      throw;
    }
    retries_ += retry.retries;
  }

  // Pinned buffers for the rows of the largest batch, three per worker (two batches on its devices, one being
  // stored), unless a buffer would exceed 512 MB (per-token rows of long batches: those are made as needed).
  void reserve_row_buffers(const Batching& batching) {
    const int64_t rows = options_.position == Position::kAll ? batching.token_budget : batching.max_examples;
    const int64_t bytes = rows * static_cast<int64_t>(plan_.layers.size()) * plan_.width * int64_t{sizeof(float)};
    if (bytes <= (int64_t{512} << 20)) row_buffers_.reserve(bytes, 3 * static_cast<int>(runners_.size()));
  }

  // Warms each model copy up on the run's first batch (BatchRunner::warm_up), the copies at once.
  void warm_up(const std::vector<int64_t>& first_batch) {
    std::vector<std::future<void>> warming;
    std::set<const model::TransformerModel*> warmed;  // the pipeline stages of a split copy share it
    for (const BatchRunner& runner : runners_) {
      if (!warmed.insert(&runner.model()).second) continue;
      warming.push_back(std::async(std::launch::async, [this, &runner, &first_batch] {
        device::OutOfMemoryRetry retry = out_of_memory_retry(runner);
        runner.warm_up(first_batch, plan_, retry);
        retries_ += retry.retries;
      }));
    }
    for (auto& copy : warming) copy.get();
  }

  // The retry state of a runner: its devices, whose caches an out-of-memory batch clears before its halves run.
  device::OutOfMemoryRetry out_of_memory_retry(const BatchRunner& runner) const {
    std::vector<device::DeviceChoice> devices;
    for (const at::Device& device : runner.devices()) {
      auto target = std::find_if(targets_.begin(), targets_.end(),
                                 [&](const device::ComputeTarget& t) { return t.device == device; });
      devices.push_back(target->choice);
    }
    return {*targets_.front().device_runtime, std::move(devices)};
  }

  // Checks and stores one batch's rows (on the host), counts it and tells the queue.
  void store_batch(const WindowQueue::Task& task, const at::Tensor& rows, const BatchRunner& runner,
                   WindowQueue& queue, const Write& write, ProgressBar& progress) {
    const std::vector<int64_t>& batch = *task.batch;
    check_finite(rows, batch, plan_, options_.position);
    int64_t tokens = store_rows(*task.rows, batch, rows, plan_, options_.position);
    {
      std::lock_guard<std::mutex> lock(progress_mutex_);
      summary_.tokens += tokens;
      summary_.computed_tokens += runner.computed_tokens(batch, plan_);
      ++summary_.batches;
      summary_.processed += static_cast<int64_t>(batch.size());
      progress.update(summary_.processed,
                      fmt::format("{:.0f} tokens/s", static_cast<double>(summary_.tokens) / seconds_since(start_)));
    }
    queue.done(task, write);
  }

  const CaptureOptions& options_;
  const CapturePlan& plan_;
  const std::vector<device::ComputeTarget>& targets_;
  std::vector<BatchRunner> runners_;
  size_t replicas_;
  CaptureSummary& summary_;
  std::mutex progress_mutex_;
  std::atomic<int64_t> retries_{0};
  Clock::time_point start_;
  device::PinnedPool row_buffers_;  // the batches' rows on their way down from GPUs
};

}  // namespace

void run_windows(const CaptureOptions& options, const CapturePlan& plan,
                 const std::vector<device::ComputeTarget>& targets, std::vector<BatchRunner> runners, size_t replicas,
                 std::vector<LayerOutput>& outputs, const std::array<activations::SplitLayout, 3>& layouts,
                 const Batching& batching, int64_t start, CaptureSummary& summary) {
  WindowLoop(options, plan, targets, std::move(runners), replicas, summary).run(outputs, layouts, batching, start);
}

}  // namespace probekit::capture
