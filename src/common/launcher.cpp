#include "common/launcher.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/units.h"

namespace probekit {

namespace {

using Environment = std::map<std::string, std::string>;

const std::vector<const char*> kVariables = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID"};

// A variable's value as a non-negative int; nullopt when unset. Anything else (a sign, spaces, a fraction, a value
// past what an int holds) is an error naming it: stoll and a cast would cut 4294967298 to 2 without a word.
std::optional<int> read_count(const Environment& environment, const std::string& name) {
  auto found = environment.find(name);
  if (found == environment.end()) return std::nullopt;
  const std::string& text = found->second;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    fail_input("--shard auto: {}={} is not a non-negative integer", name, text);
  }
  std::optional<int> value = parse_count(text);
  if (!value) {
    fail_input("--shard auto: {}={} is too large: ranks and world sizes go up to {}", name, text,
               std::numeric_limits<int>::max());
  }
  return value;
}

std::string assignment(const Environment& environment, const std::string& name) {
  auto found = environment.find(name);
  return found == environment.end() ? "" : name + "=" + found->second;
}

// The rank from a launcher's (rank, size[, local]) variables: nullopt when neither rank nor size is set,
// an error when only one is or the rank is not below the size.
std::optional<LaunchRank> read_pair(const Environment& environment, const char* launcher, const std::string& rank_name,
                                    const std::string& size_name, const std::string& local_name) {
  std::optional<int> rank = read_count(environment, rank_name), size = read_count(environment, size_name);
  if (!rank && !size) return std::nullopt;
  if (!rank || !size) {
    fail_input("--shard auto: {} sets {} but not {}", launcher, rank ? rank_name : size_name, rank ? size_name : rank_name);
  }
  if (*size < 1 || *rank >= *size) {
    fail_input("--shard auto: {}: {}={} is not a rank of {}={} (expected 0 <= rank < size)", launcher, rank_name, *rank,
               size_name, *size);
  }
  LaunchRank found{launcher, *rank, *size, read_count(environment, local_name).value_or(-1), ""};
  found.source = assignment(environment, rank_name) + " " + assignment(environment, size_name);
  if (found.local_rank >= 0) found.source += " " + assignment(environment, local_name);
  return found;
}

// A Slurm job array's element as a rank: ids need not start at 0 (--array=1-4) and may step (--array=0-9:3).
std::optional<LaunchRank> read_job_array(const Environment& environment) {
  std::optional<int> id = read_count(environment, "SLURM_ARRAY_TASK_ID");
  if (!id) return std::nullopt;
  std::optional<int> count = read_count(environment, "SLURM_ARRAY_TASK_COUNT");
  if (!count) fail_input("--shard auto: Slurm sets SLURM_ARRAY_TASK_ID={} but not SLURM_ARRAY_TASK_COUNT", *id);
  int first = read_count(environment, "SLURM_ARRAY_TASK_MIN").value_or(0);
  int step = read_count(environment, "SLURM_ARRAY_TASK_STEP").value_or(1);
  int offset = *id - first;
  if (*count < 1 || step < 1 || offset < 0 || offset % step != 0 || offset / step >= *count) {
    fail_input("--shard auto: Slurm job array task {} (min {}, step {}) is not one of its {} tasks; use a contiguous "
               "array such as --array=0-{}",
               *id, first, step, *count, *count - 1);
  }
  LaunchRank found{"Slurm job array", offset / step, *count, -1, ""};
  for (const char* name : {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT"}) {
    std::string text = assignment(environment, name);
    if (!text.empty()) found.source += (found.source.empty() ? "" : " ") + text;
  }
  return found;
}

// Each array element runs srun with several tasks: task t of element a is rank a * tasks + t, of elements x tasks.
LaunchRank combine(const LaunchRank& array, const LaunchRank& tasks) {
  int64_t world_size = static_cast<int64_t>(array.world_size) * tasks.world_size;
  if (world_size > std::numeric_limits<int>::max()) {
    fail_input("--shard auto: {} array tasks of {} srun tasks each ({} and {}) make {} ranks, more than {}",
               array.world_size, tasks.world_size, array.source, tasks.source, world_size,
               std::numeric_limits<int>::max());
  }
  return LaunchRank{"Slurm job array x srun", array.rank * tasks.world_size + tasks.rank, static_cast<int>(world_size),
                    tasks.local_rank, array.source + " " + tasks.source};
}

}  // namespace

LaunchRank launch_rank(const Environment& environment) {
  if (auto torchrun = read_pair(environment, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK")) return *torchrun;
  if (auto mpi = read_pair(environment, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK")) {
    return *mpi;
  }
  std::optional<LaunchRank> array = read_job_array(environment);
  std::optional<LaunchRank> tasks = read_pair(environment, "Slurm srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  if (array && tasks && tasks->world_size > 1) return combine(*array, *tasks);
  if (array) {
    array->local_rank = tasks ? tasks->local_rank : read_count(environment, "SLURM_LOCALID").value_or(-1);
    return *array;
  }
  if (tasks) return *tasks;
  fail_input("--shard auto: no launcher found in the environment: expected torchrun's RANK and WORLD_SIZE, Open MPI's "
             "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, a Slurm job array's SLURM_ARRAY_TASK_ID and "
             "SLURM_ARRAY_TASK_COUNT, or srun's SLURM_PROCID and SLURM_NTASKS; or give the shard as --shard I/N");
}

std::map<std::string, std::string> launcher_environment() {
  Environment environment;
  for (const char* name : kVariables) {
    if (const char* value = std::getenv(name)) environment[name] = value;
  }
  return environment;
}

}  // namespace probekit
