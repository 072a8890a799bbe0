#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {
namespace {

// Every launcher variable RankEnv reads: cleared for each test, restored afterwards.
const char* const kLauncherVars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
};

class RankEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLauncherVars) {
      const char* v = std::getenv(name);
      if (v) saved_[name] = v;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kLauncherVars) {
      auto it = saved_.find(name);
      if (it != saved_.end())
        setenv(name, it->second.c_str(), 1);
      else
        unsetenv(name);
    }
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) setenv(name, value, 1);
  }
  // Expects fromEnvironment() to fail with InvalidUsage and a message containing `part`.
  static void expectMalformed(const std::string& part) {
    try {
      RankEnv e = RankEnv::fromEnvironment();
      ADD_FAILURE() << "accepted (rank " << e.rank << " of " << e.worldSize << "); expected an error naming "
                    << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }

 private:
  std::map<std::string, std::string> saved_;
};

void expectLayout(const RankEnv& e, const char* source, int rank, int world, int localRank, int localWorld) {
  EXPECT_EQ(e.source, source);
  EXPECT_EQ(e.rank, rank);
  EXPECT_EQ(e.worldSize, world);
  EXPECT_EQ(e.localRank, localRank);
  EXPECT_EQ(e.localWorldSize, localWorld);
}

TEST_F(RankEnvTest, NoLauncherMeansOneRank) {
  expectLayout(RankEnv::fromEnvironment(), "none", 0, 1, 0, 1);
}

TEST_F(RankEnvTest, Torchrun) {
  set({{"RANK", "5"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
  expectLayout(RankEnv::fromEnvironment(), "torchrun", 5, 16, 1, 4);
}

TEST_F(RankEnvTest, OpenMpi) {
  set({{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "8"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}});
  expectLayout(RankEnv::fromEnvironment(), "openmpi", 3, 8, 3, 8);
}

TEST_F(RankEnvTest, SlurmWithTasksPerNodeCount) {
  set({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}, {"SLURM_NTASKS_PER_NODE", "4"}});
  expectLayout(RankEnv::fromEnvironment(), "slurm", 6, 8, 2, 4);
}

TEST_F(RankEnvTest, SlurmWithCompressedTasksPerNodeList) {
  // "2(x3),1": nodes 0-2 run 2 tasks, node 3 runs 1.
  set({{"SLURM_PROCID", "6"},
       {"SLURM_NTASKS", "7"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_TASKS_PER_NODE", "2(x3),1"},
       {"SLURM_NODEID", "3"}});
  expectLayout(RankEnv::fromEnvironment(), "slurm", 6, 7, 0, 1);
  set({{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}});
  expectLayout(RankEnv::fromEnvironment(), "slurm", 3, 7, 1, 2);
  set({{"SLURM_NODEID", "4"}});
  expectMalformed("SLURM_TASKS_PER_NODE='2(x3),1' has no entry for SLURM_NODEID");
  set({{"SLURM_TASKS_PER_NODE", "2(x"}, {"SLURM_NODEID", "0"}});
  expectMalformed("SLURM_TASKS_PER_NODE");
}

TEST_F(RankEnvTest, TorchrunBeatsOpenMpiBeatsSlurm) {
  set({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"}});
  EXPECT_EQ(RankEnv::fromEnvironment().source, "slurm");
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(RankEnv::fromEnvironment().source, "openmpi");
  set({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  RankEnv e = RankEnv::fromEnvironment();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 2);
}

TEST_F(RankEnvTest, MissingLocalVariablesMeanOneNode) {
  set({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  expectLayout(RankEnv::fromEnvironment(), "torchrun", 3, 4, 3, 4);
}

TEST_F(RankEnvTest, MalformedValuesNameTheVariable) {
  set({{"RANK", "abc"}, {"WORLD_SIZE", "4"}});
  expectMalformed("RANK='abc' is not a non-negative integer");
  set({{"RANK", "-1"}});
  expectMalformed("RANK='-1'");
  set({{"RANK", " 1"}});
  expectMalformed("RANK=' 1'");
  set({{"RANK", "4"}});
  expectMalformed("RANK=4 is not below WORLD_SIZE=4");
  set({{"RANK", "1"}, {"WORLD_SIZE", "0"}});
  expectMalformed("WORLD_SIZE=0 must be at least 1");
  set({{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  expectMalformed("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  set({{"LOCAL_WORLD_SIZE", "8"}});
  expectMalformed("LOCAL_WORLD_SIZE=8 must be in 1..WORLD_SIZE=4");
  set({{"LOCAL_WORLD_SIZE", "99999999999"}});
  expectMalformed("LOCAL_WORLD_SIZE='99999999999'");
  unsetenv("WORLD_SIZE");
  expectMalformed("RANK is set but WORLD_SIZE is not");
}

}  // namespace
}  // namespace meshcomm
