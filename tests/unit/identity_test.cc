// Launcher identity and run-directory naming: every rank of a job must derive the same folder without talking.
#include <gtest/gtest.h>

#include <cstdio>

#include <string>
#include <vector>

#include "shim/identity.h"
#include "support/subprocess.h"

namespace trainscope::shim {
namespace {

// An environ-style array that owns its strings.
class Env {
 public:
  Env(std::initializer_list<std::string> entries) : strings_(entries) {
    for (auto& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  char* const* get() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

std::string run_id(std::initializer_list<std::string> entries, const char* configured = "") {
  Env env(entries);
  char out[128];
  EXPECT_TRUE(run_id_from_environment(env.get(), configured, "node7", 4242, out, sizeof(out)));
  return out;
}

TEST(LauncherIdentity, TorchrunVariables) {
  Env env({"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "PATH=/bin"});
  const LauncherIdentity id = launcher_identity(env.get());
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.world, 8);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_STREQ(id.source, "RANK");
}

TEST(LauncherIdentity, OpenMpiPmiAndSlurm) {
  Env ompi({"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=16", "OMPI_COMM_WORLD_LOCAL_RANK=2"});
  EXPECT_EQ(launcher_identity(ompi.get()).rank, 5);
  EXPECT_EQ(launcher_identity(ompi.get()).world, 16);
  EXPECT_EQ(launcher_identity(ompi.get()).local_rank, 2);
  Env pmi({"PMI_RANK=7", "PMI_SIZE=9"});
  EXPECT_EQ(launcher_identity(pmi.get()).rank, 7);
  EXPECT_EQ(launcher_identity(pmi.get()).world, 9);
  Env slurm({"SLURM_PROCID=11", "SLURM_NTASKS=12", "SLURM_LOCALID=3"});
  EXPECT_EQ(launcher_identity(slurm.get()).rank, 11);
  EXPECT_EQ(launcher_identity(slurm.get()).local_rank, 3);
}

TEST(LauncherIdentity, MissingOrMalformedValuesAreUnknown) {
  Env env({"RANK=abc", "WORLD_SIZE=-4", "LOCAL_RANK=", "SLURM_PROCID=99999999999"});
  const LauncherIdentity id = launcher_identity(env.get());
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.world, -1);
  EXPECT_EQ(id.local_rank, -1);
  Env empty({});
  EXPECT_EQ(launcher_identity(empty.get()).rank, -1);
  EXPECT_EQ(launcher_identity(nullptr).rank, -1);
}

TEST(RunId, FollowsTheLaunchersJobIdentityInOrder) {
  EXPECT_EQ(run_id({"TORCHELASTIC_RUN_ID=abc123", "SLURM_JOB_ID=9", "MASTER_ADDR=h", "MASTER_PORT=1"}),
            "torchelastic-abc123");
  EXPECT_EQ(run_id({"TORCHELASTIC_RUN_ID=none", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500"}), "master-10.0.0.1-29500");
  EXPECT_EQ(run_id({"SLURM_JOB_ID=77", "SLURM_STEP_ID=2"}), "slurm-77.2");
  EXPECT_EQ(run_id({"SLURM_JOB_ID=77"}), "slurm-77");
  EXPECT_EQ(run_id({"OMPI_MCA_ess_base_jobid=1234"}), "mpi-1234");
  EXPECT_EQ(run_id({"PMIX_NAMESPACE=prterun-host-1@1"}), "mpi-prterun-host-1_1");
  EXPECT_EQ(run_id({"MASTER_ADDR=node1"}), "local-node7-pg4242");  // no port: not a job identity
  EXPECT_EQ(run_id({}), "local-node7-pg4242");
  EXPECT_EQ(run_id({"TORCHELASTIC_RUN_ID=abc"}, "explicit"), "explicit");
}

TEST(RunId, HostileCharactersAreReplaced) {
  EXPECT_EQ(run_id({"TORCHELASTIC_RUN_ID=../../etc/x y"}), "torchelastic-.._.._etc_x_y");
}

TEST(RunId, TooLongDoesNotFit) {
  Env env({"TORCHELASTIC_RUN_ID=" + std::string(200, 'a')});
  char out[64];
  EXPECT_FALSE(run_id_from_environment(env.get(), "", "h", 1, out, sizeof(out)));
}

}  // namespace
}  // namespace trainscope::shim
