// --shard auto: the rank and world size of this process from each launcher's environment variables, as pure
// functions of the environment (the end-to-end runs with the variables set are in tests/torch/test_scale.cpp).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "common/launcher.h"

using namespace probekit;

namespace {

void check_rank(const std::map<std::string, std::string>& environment, const std::string& launcher, int64_t rank,
                int64_t world_size, int64_t local_rank) {
  LaunchRank found = launch_rank(environment);
  CHECK(found.launcher == launcher);
  CHECK(found.rank == rank);
  CHECK(found.world_size == world_size);
  CHECK(found.local_rank == local_rank);
}

void check_refused(const std::map<std::string, std::string>& environment, const std::string& message) {
  CHECK_THROWS_AS_MESSAGE(launch_rank(environment), std::invalid_argument, message);
  CHECK_THROWS_WITH(launch_rank(environment), doctest::Contains(message.c_str()));
}

}  // namespace

TEST_CASE("each launcher's rank, world size and local rank") {
  check_rank({{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"}}, "torchrun", 5, 16, 1);
  check_rank({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}},
             "Open MPI", 3, 4, 3);
  check_rank({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"}}, "Slurm srun", 7, 8, 3);
  // sbatch --array=0-3: task 2 of 4; a batch script's single task sets SLURM_PROCID=0 of SLURM_NTASKS=1.
  check_rank({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"},
              {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}},
             "Slurm job array", 2, 4, 0);
  // --array=1-4 numbers its tasks from 1, --array=10-40:10 in steps of 10: ranks still count from 0.
  check_rank({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "1"}},
             "Slurm job array", 0, 4, -1);
  check_rank({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "1"}},
             "Slurm job array", 3, 4, -1);
  check_rank({{"SLURM_ARRAY_TASK_ID", "30"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "10"},
              {"SLURM_ARRAY_TASK_STEP", "10"}},
             "Slurm job array", 2, 4, -1);
  // Array element 2 of 3, srun task 1 of 4 in it: rank 2 * 4 + 1 of 12.
  check_rank({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"},
              {"SLURM_LOCALID", "1"}},
             "Slurm job array x srun", 9, 12, 1);
  // torchrun started by srun (one torchrun per node): torchrun's global rank, not the node's task id.
  check_rank({{"RANK", "9"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}},
             "torchrun", 9, 16, 1);
  CHECK(launch_rank({{"RANK", "5"}, {"WORLD_SIZE", "16"}}).source == "RANK=5 WORLD_SIZE=16");
}

TEST_CASE("no launcher, or values that do not fit together, are refused naming the variables") {
  check_refused({}, "no launcher found in the environment");
  check_refused({{"RANK", "2"}}, "torchrun sets RANK but not WORLD_SIZE");
  check_refused({{"OMPI_COMM_WORLD_SIZE", "2"}}, "Open MPI sets OMPI_COMM_WORLD_SIZE but not OMPI_COMM_WORLD_RANK");
  check_refused({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK=4 is not a rank of WORLD_SIZE=4");
  check_refused({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}, "SLURM_PROCID=0 is not a rank of SLURM_NTASKS=0");
  check_refused({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "RANK=-1 is not a non-negative integer");
  check_refused({{"RANK", "two"}, {"WORLD_SIZE", "4"}}, "RANK=two is not a non-negative integer");
  check_refused({{"SLURM_ARRAY_TASK_ID", "3"}}, "SLURM_ARRAY_TASK_ID=3 but not SLURM_ARRAY_TASK_COUNT");
  // --array=1,5,9 (not contiguous): task 5 of 3, counted from 1, has no rank.
  check_refused({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_ARRAY_TASK_MIN", "1"}},
                "Slurm job array task 5 (min 1, step 1) is not one of its 3 tasks");
}

TEST_CASE("every launcher variable is read strictly: digits only, within an int, or refused naming it") {
  // Each launcher's variables, all set, so that each one is read.
  const std::vector<std::map<std::string, std::string>> launches = {
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}},
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
      {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"},
       {"SLURM_ARRAY_TASK_STEP", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}}};
  // 2^32 + 2 became 2 through a cast: shard 1 of 2 while the log said 1 of 4294967298.
  const char* const too_large[] = {"4294967298", "2147483648", "99999999999999999999999"};
  const char* const malformed[] = {"", "+3", "-3", " 3", "3 ", "3x", "0x10", "1e3", "3.0"};
  int variables = 0;
  for (const auto& launch : launches) {
    CHECK_NOTHROW(launch_rank(launch));
    for (const auto& [name, value] : launch) {
      ++variables;
      for (const char* bad : too_large) {
        auto environment = launch;
        environment[name] = bad;
        check_refused(environment, fmt::format("{}={} is too large: ranks and world sizes go up to 2147483647", name, bad));
      }
      for (const char* bad : malformed) {
        auto environment = launch;
        environment[name] = bad;
        check_refused(environment, fmt::format("{}={} is not a non-negative integer", name, bad));
      }
    }
  }
  CHECK(variables == 13);  // all that launcher_environment() passes on
  // The largest values an int holds are taken as they are; leading zeros are still decimal.
  check_rank({{"RANK", "2147483646"}, {"WORLD_SIZE", "2147483647"}}, "torchrun", 2147483646, 2147483647, -1);
  check_rank({{"RANK", "007"}, {"WORLD_SIZE", "0000000000000000000008"}}, "torchrun", 7, 8, -1);
  // Array elements x srun tasks past an int: refused, not wrapped around.
  check_refused({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "65536"}, {"SLURM_PROCID", "1"},
                 {"SLURM_NTASKS", "65536"}},
                "65536 array tasks of 65536 srun tasks each (SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=65536 and "
                "SLURM_PROCID=1 SLURM_NTASKS=65536) make 4294967296 ranks, more than 2147483647");
}
