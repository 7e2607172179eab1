// Which process of a multi-process run this is, read from the environment of the launcher that started it:
// Slurm (job arrays and srun tasks), torchrun and Open MPI. The launcher is the engine: no coordinator of our
// own, just the rank and world size it already hands every process.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace probekit {

/// This process's place in a launch. `int`, as the capture's shard index and count hold them: a launcher value
/// beyond it is refused, never cut to another shard.
struct LaunchRank {
  std::string launcher;  // "torchrun", "Open MPI", "Slurm srun", "Slurm job array", "Slurm job array x srun"
  int rank = 0;          // 0 <= rank < world_size
  int world_size = 1;
  int local_rank = -1;   // rank among the processes of this machine (picks the GPU); -1: not given
  std::string source;    // the variables it came from, for the log: "RANK=3 WORLD_SIZE=8 LOCAL_RANK=3"
};

/// Reads the rank from `environment` (variable -> value). A launcher whose variables are all present wins in
/// this order: torchrun (RANK, WORLD_SIZE, LOCAL_RANK), Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
/// OMPI_COMM_WORLD_LOCAL_RANK), then Slurm: a job array (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN,
/// divided by SLURM_ARRAY_TASK_STEP, of SLURM_ARRAY_TASK_COUNT) and srun's tasks (SLURM_PROCID of
/// SLURM_NTASKS, SLURM_LOCALID), combined when both are there (task t of array element a: a * ntasks + t).
/// Throws std::invalid_argument naming the variables when none is found, their values disagree, or one is not a
/// plain decimal (digits only) that an int holds.
LaunchRank launch_rank(const std::map<std::string, std::string>& environment);

/// The variables launch_rank reads, from this process's environment.
std::map<std::string, std::string> launcher_environment();

}  // namespace probekit
