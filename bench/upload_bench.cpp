// upload_bench: how fast a checkpoint's tensors reach the GPU from the page cache, and what the process pays
// afterwards to unmap them. Each repeat opens the checkpoint afresh (a new memory map, as a new process has) and
// uploads every tensor of at least 4 MB into memory allocated afresh: `staged` through device::StagedUpload copying
// from the memory map, `staged_file` reading the file with pread instead (StagedUpload::upload_from_file, the loader's
// route), `staged_readahead` the first with model::Prefetcher's 8 threads beside it as TransformerModel::load runs
// them; `model_load` is TransformerModel::load as ranking loads the model. With --cold the files leave the page cache
// before each. Prints one JSON line per route: GB, the upload's seconds per repeat and GB/s at the median, and the
// seconds the checkpoint's release took after each (its map's unmapping: pages faulted in cost again there).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "cli/torch/torch_tool.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "device/torch/gpu_utils.h"
#include "model/transformer.h"
#include "model/weights.h"

using namespace probekit;

namespace {

constexpr uint64_t kStagedBytes = 4ull << 20;

struct Timing {
  double gigabytes = 0, upload_s = 0, release_s = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// TransformerModel::load as ranking loads the model (every layer, the embedding table left on the host), its own
// read-ahead included.
Timing model_load(const std::string& dir, at::Device device) {
  model::LoadOptions options;
  options.device = device;
  options.dtype = at::kBFloat16;
  options.final_norm = false;
  options.embeddings_on_host = true;
  Timing timing;
  auto start = std::chrono::steady_clock::now();
  std::optional<model::TransformerModel> model = model::TransformerModel::load(dir, options);
  device::synchronize(device);
  timing.upload_s = seconds_since(start);
  timing.gigabytes = static_cast<double>(model->weight_bytes()) / 1e9;
  start = std::chrono::steady_clock::now();
  model.reset();
  timing.release_s = seconds_since(start);
  return timing;
}

Timing upload(const std::string& route, const std::string& dir, at::Device device, int64_t buffer_bytes) {
  if (route == "model_load") return model_load(dir, device);
  Timing timing;
  auto start = std::chrono::steady_clock::now();
  std::optional<model::Checkpoint> checkpoint = model::Checkpoint::open(dir);
  std::unique_ptr<model::Prefetcher> read_ahead;
  if (route == "staged_readahead") {
    read_ahead = std::make_unique<model::Prefetcher>(
        checkpoint->byte_ranges([](const std::string&, const safetensors::TensorInfo& info) { return info.nbytes() >= kStagedBytes; }),
        8);
  }
  std::vector<at::Tensor> uploaded;
  {
    device::StagedUpload uploads(buffer_bytes);
    for (const std::string& name : checkpoint->names()) {
      const model::Checkpoint::Entry entry = *checkpoint->find(name);
      if (entry.info->nbytes() < kStagedBytes) continue;
      const at::Tensor host = at::from_blob(const_cast<uint8_t*>(entry.file->data(*entry.info)),
                                            {static_cast<int64_t>(entry.info->nbytes())}, at::kByte);
      uploaded.push_back(route == "staged_file" ? uploads.upload_from_file(entry.file->path(), entry.info->data_begin, host, device)
                                                : uploads.upload(host, device));
      timing.gigabytes += static_cast<double>(entry.info->nbytes()) / 1e9;
    }
  }
  device::synchronize(device);
  timing.upload_s = seconds_since(start);
  read_ahead.reset();
  start = std::chrono::steady_clock::now();
  checkpoint.reset();
  timing.release_s = seconds_since(start);
  return timing;
}

// Drops the checkpoint's files from the page cache (clean pages only: written back first), for a cold start.
void evict(const std::string& dir) {
  for (const std::string& name : list_directory(dir)) {
    if (name.size() < 12 || name.substr(name.size() - 12) != ".safetensors") continue;
    const int fd = open_input_file(dir + "/" + name);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  TorchTool tool("Benchmark: a checkpoint's tensors from the page cache to the GPU by several routes");
  std::string model_dir;
  std::vector<std::string> routes{"staged", "staged_file", "staged_readahead", "model_load"};
  int64_t repeats = 5, buffer_mb = 64;
  bool cold = false;
  tool.app.add_option("--model", model_dir, "Checkpoint folder")->required();
  tool.app.add_option("--routes", routes, "Routes to time, alternating")->capture_default_str();
  tool.app.add_option("--repeats", repeats, "Repeats of each route")->capture_default_str();
  tool.app.add_option("--buffer-mb", buffer_mb, "Each pinned buffer's size")->capture_default_str();
  tool.app.add_flag("--cold", cold, "Drop the checkpoint from the page cache before each route");
  return tool.run(argc, argv, [&] {
    const at::Device device = device::select_compute("auto", "auto").device;
    for (const std::string& route : routes) {
      if (route != "staged" && route != "staged_file" && route != "staged_readahead" && route != "model_load") {
        fail_usage("--routes: unknown route {}", route);
      }
      if (route != "model_load" && !device.is_cuda()) fail_input("the route {} stages through pinned memory: it needs a CUDA GPU", route);
    }
    std::map<std::string, std::vector<Timing>> timings;
    for (int64_t r = 0; r < repeats; ++r) {
      for (const std::string& route : routes) {
        if (cold) evict(model_dir);
        timings[route].push_back(upload(route, model_dir, device, buffer_mb << 20));
        device::empty_cache(device);  // the next repeat allocates afresh, as a new process does
      }
    }
    for (const std::string& route : routes) {
      std::vector<double> upload_s, release_s;
      for (const Timing& t : timings[route]) upload_s.push_back(t.upload_s), release_s.push_back(t.release_s);
      std::vector<double> sorted = upload_s;
      std::sort(sorted.begin(), sorted.end());
      const double gigabytes = timings[route].front().gigabytes;
      fmt::print("{}\n", Json{{"route", route}, {"gigabytes", gigabytes}, {"upload_s", upload_s},
                              {"gb_per_s_median", gigabytes / sorted[sorted.size() / 2]}, {"release_s", release_s},
                              {"cold", cold}}.dump());
    }
  });
}
