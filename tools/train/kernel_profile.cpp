// cairn-train's per-kernel profile: the profiled backend around the trainer's kernel table, and its report.
#include "kernel_profile.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cairn/files.h"
#include "cairn/kernels/profile.h"
#include "cairn/log.h"
#include "cairn/mpi.h"
#include "cairn/provenance.h"

namespace cairn::train {

const kernels::Backend* maybe_profiled(const Settings& s, const kernels::Backend* inner) {
  if (!s.profile_kernels || inner == nullptr) return inner;
  kernels::profile_reset();
  return &kernels::profiled_backend(*inner);
}

void write_kernel_profile(const Settings& s, int64_t steps) {
  if (!s.profile_kernels) return;
  nlohmann::json mine = nlohmann::json::array();
  for (const kernels::OpTime& o : kernels::profile_report())
    mine.push_back({{"op", o.op}, {"calls", o.calls}, {"seconds", o.seconds}});
  const std::vector<std::string> all = mpi::allgather_strings(mine.dump());
  if (s.rank != 0) return;
  nlohmann::json ranks = nlohmann::json::array();
  std::map<std::string, std::pair<long, double>> total;  // op -> calls, seconds over all ranks
  double seconds = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json ops = nlohmann::json::parse(all[r]);
    for (const auto& o : ops) {
      auto& t = total[o["op"].get<std::string>()];
      t.first += o["calls"].get<long>();
      t.second += o["seconds"].get<double>();
      seconds += o["seconds"].get<double>();
    }
    ranks.push_back({{"rank", r}, {"ops", ops}});
  }
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  nlohmann::json doc = {
      {"kind", "kernel_profile"},
      {"backend", s.backend},
      {"world_size", s.world},
      {"steps", steps},
      {"what", "wall time of every kernel call, synchronized after each, summed per op on each rank over this "
               "process's steps, validation passes and initialisation"},
      {"ranks", ranks},
      {"provenance", provenance().to_json()}};
  const std::string path = join_path(s.train_dir, "kernel_profile.json");
  atomic_write(path, doc.dump(1) + "\n");
  std::vector<std::pair<std::string, std::pair<long, double>>> rows(total.begin(), total.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  CAIRN_LOG_INFO("kernel profile (all %d ranks, %lld steps; \"%s\"): %.3f s in kernels, %.1f ms per step and rank",
                 s.world, static_cast<long long>(steps), path.c_str(), seconds,
                 1e3 * seconds * per / std::max(1, s.world));
  for (size_t i = 0; i < rows.size() && i < 12; ++i) {
    const auto& [op, t] = rows[i];
    CAIRN_LOG_INFO("  %-26s %10ld calls %9.3f s %5.1f %%  %8.2f us/call", op.c_str(), t.first, t.second,
                   seconds > 0 ? 100 * t.second / seconds : 0.0, t.first > 0 ? 1e6 * t.second / t.first : 0.0);
  }
}

}  // namespace cairn::train
