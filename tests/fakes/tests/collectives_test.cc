// Every collective x data type x reduction op x size x placement on 2 and 4 forked ranks, against a reference.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <nccl.h>

#include "rank_processes.h"
#include "reference.h"
#include "src/shared_segment.h"

namespace tsfake_test {
namespace {

enum class Coll { kAllReduce, kReduce, kBroadcast, kReduceScatter, kAllGather, kAlltoAll, kGather, kScatter };

const char* coll_name(Coll c) {
  static const char* const kNames[] = {"AllReduce", "Reduce",   "Broadcast", "ReduceScatter",
                                       "AllGather", "AlltoAll", "Gather",    "Scatter"};
  return kNames[static_cast<int>(c)];
}
bool reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }
// Inputs hold one block per rank for these.
bool blocked_input(Coll c) { return c == Coll::kReduceScatter || c == Coll::kAlltoAll || c == Coll::kScatter; }
bool blocked_output(Coll c) { return c == Coll::kAllGather || c == Coll::kGather || c == Coll::kAlltoAll; }

// Larger than the stand-in's staging chunk for every element size, and odd.
constexpr std::size_t kLargeCount = tsfake::kStagingBytes + 77;
constexpr std::size_t kSizes[] = {0, 1, 37, kLargeCount};

struct Case {
  Coll coll;
  ncclDataType_t datatype;
  TestOp op;
  std::size_t count;
  bool in_place;
  int root;
  int salt;
};

std::string describe(const Case& c) {
  return std::string(coll_name(c.coll)) + " " + type_name(c.datatype) + " " + (reduces(c.coll) ? op_name(c.op) : "") +
         " count=" + std::to_string(c.count) + (c.in_place ? " in-place" : " out-of-place") +
         " root=" + std::to_string(c.root);
}

ncclResult_t make_op(const Case& c, int rank, ncclComm_t comm, Bytes& scalar, ncclRedOp_t* op) {
  switch (c.op) {
    case TestOp::kSum:
      *op = ncclSum;
      return ncclSuccess;
    case TestOp::kProd:
      *op = ncclProd;
      return ncclSuccess;
    case TestOp::kMax:
      *op = ncclMax;
      return ncclSuccess;
    case TestOp::kMin:
      *op = ncclMin;
      return ncclSuccess;
    case TestOp::kAvg:
      *op = ncclAvg;
      return ncclSuccess;
    case TestOp::kPreMulSum:
      scalar = premul_scalar(c.datatype, rank);
      return ncclRedOpCreatePreMulSum(op, scalar.data(), c.datatype,
                                      c.salt % 2 == 0 ? ncclScalarHostImmediate : ncclScalarDevice, comm);
  }
  return ncclInvalidArgument;
}

// The result every rank should see, computed from all ranks' inputs.
Bytes expected_output(const Case& c, int rank, int nranks, const std::vector<Bytes>& inputs) {
  const std::size_t size = element_size(c.datatype);
  const std::size_t block = c.count * size;
  Bytes out;
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kReduce:
      return reference_reduce(c.datatype, c.op, inputs, c.count);
    case Coll::kBroadcast:
      return inputs[static_cast<std::size_t>(c.root)];
    case Coll::kReduceScatter: {
      Bytes all = reference_reduce(c.datatype, c.op, inputs, c.count * static_cast<std::size_t>(nranks));
      return Bytes(all.begin() + static_cast<long>(rank * block), all.begin() + static_cast<long>((rank + 1) * block));
    }
    case Coll::kAllGather:
    case Coll::kGather:
      for (const Bytes& in : inputs) out.insert(out.end(), in.begin(), in.end());
      return out;
    case Coll::kAlltoAll:
      for (const Bytes& in : inputs) {
        out.insert(out.end(), in.begin() + static_cast<long>(rank * block),
                   in.begin() + static_cast<long>((rank + 1) * block));
      }
      return out;
    case Coll::kScatter: {
      const Bytes& in = inputs[static_cast<std::size_t>(c.root)];
      return Bytes(in.begin() + static_cast<long>(rank * block), in.begin() + static_cast<long>((rank + 1) * block));
    }
  }
  return out;
}

void run_case(const Case& c, int rank, int nranks, ncclComm_t comm, RankChecks& check) {
  const std::size_t size = element_size(c.datatype);
  const std::size_t per_rank_in = blocked_input(c.coll) ? c.count * static_cast<std::size_t>(nranks) : c.count;
  const std::size_t out_elems = blocked_output(c.coll) ? c.count * static_cast<std::size_t>(nranks) : c.count;
  std::vector<Bytes> inputs;
  for (int r = 0; r < nranks; ++r) inputs.push_back(make_input(c.datatype, per_rank_in, r, c.salt));
  const Bytes& mine = inputs[static_cast<std::size_t>(rank)];
  const bool root = rank == c.root;

  // Buffers laid out exactly as nccl.h documents each in-place variant.
  Bytes send = mine;
  Bytes recv(out_elems * size + 1, 0xa5);  // +1: never hand out a NULL data() pointer
  Bytes shared;
  const void* sendbuff = send.data();
  void* recvbuff = recv.data();
  unsigned char* result = recv.data();
  if (c.in_place) {
    const std::size_t block = c.count * size;
    switch (c.coll) {
      case Coll::kAllReduce:
      case Coll::kReduce:
      case Coll::kBroadcast:
      case Coll::kAlltoAll:
        shared = mine;
        shared.push_back(0);
        sendbuff = recvbuff = result = shared.data();
        break;
      case Coll::kReduceScatter:
        shared = mine;
        shared.push_back(0);
        sendbuff = shared.data();
        recvbuff = result = shared.data() + static_cast<std::size_t>(rank) * block;
        break;
      case Coll::kAllGather:
        shared.assign(out_elems * size + 1, 0xa5);
        if (block > 0) std::memcpy(shared.data() + static_cast<std::size_t>(rank) * block, mine.data(), block);
        recvbuff = result = shared.data();
        sendbuff = shared.data() + static_cast<std::size_t>(rank) * block;
        break;
      case Coll::kGather:
        if (root) {
          shared.assign(out_elems * size + 1, 0xa5);
          if (block > 0) std::memcpy(shared.data() + static_cast<std::size_t>(rank) * block, mine.data(), block);
          recvbuff = result = shared.data();
          sendbuff = shared.data() + static_cast<std::size_t>(rank) * block;
        }
        break;
      case Coll::kScatter:
        if (root) {
          shared = mine;
          shared.push_back(0);
          sendbuff = shared.data();
          recvbuff = result = shared.data() + static_cast<std::size_t>(rank) * block;
        }
        break;
    }
  }

  ncclResult_t status = ncclSuccess;
  ncclRedOp_t op = ncclSum;
  Bytes scalar;
  if (reduces(c.coll)) {
    if (!check.nccl(make_op(c, rank, comm, scalar, &op), "create op for " + describe(c))) return;
  }
  switch (c.coll) {
    case Coll::kAllReduce:
      status = ncclAllReduce(sendbuff, recvbuff, c.count, c.datatype, op, comm, nullptr);
      break;
    case Coll::kReduce:
      status = ncclReduce(sendbuff, recvbuff, c.count, c.datatype, op, c.root, comm, nullptr);
      break;
    case Coll::kBroadcast:
      status = c.in_place ? ncclBcast(recvbuff, c.count, c.datatype, c.root, comm, nullptr)
                          : ncclBroadcast(sendbuff, recvbuff, c.count, c.datatype, c.root, comm, nullptr);
      break;
    case Coll::kReduceScatter:
      status = ncclReduceScatter(sendbuff, recvbuff, c.count, c.datatype, op, comm, nullptr);
      break;
    case Coll::kAllGather:
      status = ncclAllGather(sendbuff, recvbuff, c.count, c.datatype, comm, nullptr);
      break;
    case Coll::kAlltoAll:
      status = ncclAlltoAll(sendbuff, recvbuff, c.count, c.datatype, comm, nullptr);
      break;
    case Coll::kGather:
      status = ncclGather(sendbuff, recvbuff, c.count, c.datatype, c.root, comm, nullptr);
      break;
    case Coll::kScatter:
      status = ncclScatter(sendbuff, recvbuff, c.count, c.datatype, c.root, comm, nullptr);
      break;
  }
  if (c.op == TestOp::kPreMulSum && reduces(c.coll)) check.nccl(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy");
  if (!check.nccl(status, describe(c))) return;
  const bool has_output = !((c.coll == Coll::kReduce || c.coll == Coll::kGather) && !root);
  if (!has_output) return;
  const Bytes expected = expected_output(c, rank, nranks, inputs);
  const std::string difference = compare(c.datatype, result, expected.data(), out_elems);
  check(difference.empty(), describe(c) + ": " + difference);
}

class CollectiveTest : public ::testing::TestWithParam<std::tuple<Coll, int>> {};

TEST_P(CollectiveTest, MatchesReferenceForEveryTypeOpSizeAndPlacement) {
  const Coll coll = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  const std::string problems = run_ranks(nranks, [coll](int rank, int n, const ncclUniqueId& id, RankChecks& check) {
    ncclComm_t comm = nullptr;
    if (!check.nccl(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank")) return;
    int salt = 0;
    for (ncclDataType_t datatype : kAllDatatypes) {
      for (TestOp op : kAllTestOps) {
        if (!reduces(coll) && op != TestOp::kSum) continue;
        for (std::size_t count : kSizes) {
          for (bool in_place : {false, true}) {
            ++salt;
            run_case(Case{coll, datatype, op, count, in_place, salt % n, salt}, rank, n, comm, check);
          }
        }
      }
    }
    check.nccl(ncclCommDestroy(comm), "ncclCommDestroy");
  });
  EXPECT_EQ(problems, "");
}

INSTANTIATE_TEST_SUITE_P(AllCollectives, CollectiveTest,
                         ::testing::Combine(::testing::Values(Coll::kAllReduce, Coll::kReduce, Coll::kBroadcast,
                                                              Coll::kReduceScatter, Coll::kAllGather, Coll::kAlltoAll,
                                                              Coll::kGather, Coll::kScatter),
                                            ::testing::Values(2, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Coll, int>>& case_info) {
                           return std::string(coll_name(std::get<0>(case_info.param))) + "_" +
                                  std::to_string(std::get<1>(case_info.param)) + "ranks";
                         });

}  // namespace
}  // namespace tsfake_test
