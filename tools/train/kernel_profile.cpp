// cairn-train's per-kernel profile: the profiled backend around the trainer's kernel table, and its report.
#include "kernel_profile.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/files.h"
#include "cairn/json_text.h"
#include "cairn/kernels/profile.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"
#include "cairn/records.h"

namespace cairn::train {

const kernels::Backend* maybe_profiled(const Settings& s, const kernels::Backend* inner) {
  if (!s.profile_kernels || inner == nullptr) return inner;
  kernels::profile_reset();
  return &kernels::profiled_backend(*inner);
}

void write_kernel_profile(const Settings& s, int64_t steps) {
  if (!s.profile_kernels) return;
  nlohmann::json mine = {{"ops", nlohmann::json::array()}, {"gemm_shapes", nlohmann::json::array()}};
  for (const kernels::OpTime& o : kernels::profile_report())
    mine["ops"].push_back({{"op", o.op}, {"calls", o.calls}, {"seconds", o.seconds}});
  // Each matmul's shape (cairn-plan calibrate --from-runs refits the GEMM table at these shapes).
  for (const kernels::GemmShapeTime& g : kernels::profile_gemm_shapes())
    mine["gemm_shapes"].push_back({{"op", g.op},
                                   {"n", g.n},
                                   {"c", g.c},
                                   {"oc", g.oc},
                                   {"grad_input", g.grad_input},
                                   {"calls", g.calls},
                                   {"seconds", g.seconds}});
  const std::vector<std::string> all = mpi::allgather_strings(mine.dump());
  if (s.rank != 0) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < all.size(); ++r) {
    nlohmann::json one = nlohmann::json::parse(all[r]);
    ranks.push_back({{"rank", r}, {"ops", one["ops"]}, {"gemm_shapes", one["gemm_shapes"]}});
  }
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  nlohmann::json doc = {
      {"kind", "kernel_profile"},
      {"backend", s.backend},
      {"world_size", s.world},
      {"steps", steps},
      {"what", "wall time of every kernel call, synchronized after each, summed per op on each rank over this "
               "process's steps, validation passes and initialisation; gemm_shapes: the matmul calls by shape, "
               "out[n, oc] = inp[n, c] @ W (backward: dweight, and dinp when grad_input)"},
      {"ranks", ranks},
      {"provenance", provenance().to_json()}};
  const std::string path = join_path(s.train_dir, "kernel_profile.json");
  atomic_write(path, json_text(doc, 1) + "\n");
  const records::KernelProfileTotals total = records::kernel_profile_totals(doc);  // as cairn-report shows them
  CAIRN_LOG_INFO("kernel profile (all %d ranks, %lld steps; \"%s\"): %.3f s in kernels, %.1f ms per step and rank",
                 s.world, static_cast<long long>(steps), path.c_str(), total.seconds,
                 1e3 * total.seconds * per / std::max(1, s.world));
  for (size_t i = 0; i < total.ops.size() && i < 12; ++i) {
    const records::KernelOpTotal& op = total.ops[i];
    CAIRN_LOG_INFO("  %-26s %10.0f calls %9.3f s %5.1f %%  %8.2f us/call", op.op.c_str(), op.calls, op.seconds,
                   total.seconds > 0 ? 100 * op.seconds / total.seconds : 0.0,
                   op.calls > 0 ? 1e6 * op.seconds / op.calls : 0.0);
  }
}

}  // namespace cairn::train
