// The rank-to-GPU rule (cairn/device_binding.h) with CUDA_VISIBLE_DEVICES semantics, on a machine without GPUs.
#define BOOST_TEST_MODULE common_device_binding
#include <boost/test/unit_test.hpp>

#include "cairn/device_binding.h"
#include "cairn/error.h"

// The rank-to-GPU rule with CUDA_VISIBLE_DEVICES semantics, on a machine without GPUs.
BOOST_AUTO_TEST_CASE(device_binding_rule) {
  // 8 ranks per node, all 8 GPUs visible: rank i drives GPU i.
  for (int r = 0; r < 8; ++r) BOOST_TEST(cairn::device_for_local_rank(r, 8, "t") == r);
  // srun --gpus-per-task=1: every rank sees one device (its own) and uses device 0.
  for (int r = 0; r < 8; ++r) BOOST_TEST(cairn::device_for_local_rank(r, 1, "t") == 0);
  // 4 visible for 8 ranks: two ranks per device (the PCI check in gpu::bind_rank_to_gpu then refuses it).
  BOOST_TEST(cairn::device_for_local_rank(5, 4, "t") == 1);
  BOOST_CHECK_THROW(cairn::device_for_local_rank(0, 0, "t"), cairn::UsageError);
  BOOST_TEST(cairn::visible_devices_from_env(nullptr, 8) == 8);
  BOOST_TEST(cairn::visible_devices_from_env("", 8) == 0);
  BOOST_TEST(cairn::visible_devices_from_env("-1", 8) == 0);
  BOOST_TEST(cairn::visible_devices_from_env("3", 8) == 1);
  BOOST_TEST(cairn::visible_devices_from_env("0,1,2,3", 8) == 4);
  BOOST_TEST(cairn::visible_devices_from_env("0,9,1", 8) == 1);  // an invalid index ends the list
  BOOST_TEST(cairn::visible_devices_from_env("1,1", 8) == 1);    // so does a repeat
  BOOST_TEST(cairn::visible_devices_from_env("GPU-8f2b1c3e-0000,GPU-1a2b", 8) == 2);
  // The two together: CUDA_VISIBLE_DEVICES=2,3 with 4 local ranks -> ranks 0..3 on visible devices 0,1,0,1.
  const int visible = cairn::visible_devices_from_env("2,3", 8);
  BOOST_TEST(cairn::device_for_local_rank(2, visible, "t") == 0);
  BOOST_TEST(cairn::device_for_local_rank(3, visible, "t") == 1);
}
