// cairn::gpu::nccl_group (cairn/gpu_nccl.h), the one NCCL group guard of cairn-train and cairn-sweep: a throw between
// ncclGroupStart and ncclGroupEnd still closes the group. NCCL keeps the group depth per thread on the host, and an
// ncclGroupEnd outside any group is ncclInvalidUsage, so the test runs without a GPU: after the guard, a stray
// ncclGroupEnd must be refused (the group was closed); without it, that call would close the group left open.
#define BOOST_TEST_MODULE gpu_nccl_group
#include <boost/test/unit_test.hpp>
#include <stdexcept>

#include "cairn/gpu_nccl.h"

BOOST_AUTO_TEST_CASE(group_closed_after_a_throw) {
  int ran = 0;
  BOOST_CHECK_THROW(cairn::gpu::nccl_group([&] {
                      ++ran;
                      throw std::runtime_error("a send failed");
                    }),
                    std::runtime_error);
  BOOST_TEST(ran == 1);
  BOOST_TEST(ncclGroupEnd() == ncclInvalidUsage);  // depth 0: the guard closed the group
}

BOOST_AUTO_TEST_CASE(group_closed_after_success) {
  int ran = 0;
  cairn::gpu::nccl_group([&] { ++ran; });
  BOOST_TEST(ran == 1);
  BOOST_TEST(ncclGroupEnd() == ncclInvalidUsage);
  // and a group opened by hand still pairs normally
  BOOST_TEST(ncclGroupStart() == ncclSuccess);
  BOOST_TEST(ncclGroupEnd() == ncclSuccess);
}
