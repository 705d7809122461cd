// `trainscope run` on several hosts: the run id every host derives alike, and which host starts the coordinator.
#include "tools/multi_node_run.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainscope::tools {
namespace {

std::string run_id_of(std::vector<std::string> env, const std::vector<std::string>& command) {
  std::vector<char*> pointers;
  for (auto& entry : env) pointers.push_back(entry.data());
  pointers.push_back(nullptr);
  return scheduler_run_id(pointers.data(), command);
}

TEST(MultiNodeRun, SlurmsJobAndStepNameTheRun) {
  EXPECT_EQ(run_id_of({"SLURM_JOB_ID=812", "SLURM_STEP_ID=3"}, {"torchrun", "--rdzv-id", "abc"}), "slurm-812.3");
  EXPECT_EQ(run_id_of({"SLURM_JOB_ID=812"}, {"python", "train.py"}), "slurm-812");
  EXPECT_EQ(run_id_of({"SLURM_JOB_ID="}, {"python", "train.py"}), "");
}

TEST(MultiNodeRun, TorchrunsRendezvousIdNamesTheRunWithoutSlurm) {
  EXPECT_EQ(run_id_of({}, {"torchrun", "--nnodes", "2", "--rdzv-id", "job/7", "train.py"}), "torchrun-job-7");
  EXPECT_EQ(run_id_of({}, {"torchrun", "--rdzv_id=exp1", "train.py"}), "torchrun-exp1");
  // torchrun's default id is the same for every job: it names none.
  EXPECT_EQ(run_id_of({}, {"torchrun", "--rdzv-id", "none", "train.py"}), "");
  EXPECT_EQ(run_id_of({}, {"torchrun", "train.py", "--rdzv-id"}), "");
  EXPECT_EQ(run_id_of({"SLURM_JOB_IDX=1"}, {"mpirun", "-n", "8", "a.out"}), "");
}

TEST(MultiNodeRun, HostAndPortSplitWithWhatIsAccepted) {
  std::string host, error;
  uint16_t port = 0;
  ASSERT_TRUE(split_host_port("node-1.cluster:29603", &host, &port, &error)) << error;
  EXPECT_EQ(host, "node-1.cluster");
  EXPECT_EQ(port, 29603);
  ASSERT_TRUE(split_host_port("[fe80::1]:7", &host, &port, &error)) << error;
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, 7);
  for (const char* bad : {"node", "node:", ":80", "node:0", "node:65536", "node:8x", "fe80::1:7", "[fe80::1]7"}) {
    EXPECT_FALSE(split_host_port(bad, &host, &port, &error)) << bad;
    EXPECT_NE(error.find("accepted HOST:PORT or [IPv6]:PORT"), std::string::npos) << error;
  }
}

TEST(MultiNodeRun, OnlyThisHostsOwnAddressesHostTheCoordinator) {
  std::string numeric, error;
  EXPECT_TRUE(is_local_address("127.0.0.1", &numeric, &error)) << error;
  EXPECT_EQ(numeric, "127.0.0.1");
  EXPECT_TRUE(error.empty());
  // TEST-NET-1 (RFC 5737) is nobody's address.
  EXPECT_FALSE(is_local_address("192.0.2.1", &numeric, &error));
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_FALSE(is_local_address("no-such-host.invalid", &numeric, &error));
  EXPECT_NE(error.find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << error;
}

}  // namespace
}  // namespace trainscope::tools
