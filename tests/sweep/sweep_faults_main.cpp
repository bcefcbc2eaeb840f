// cairn-sweep with injected faults, for tests/sweep/cli_test.sh only (never installed): the tool's own command line
// (sweep_main) with a SweepFaults taken from leading options, so the real binary carries no test hooks.
// Usage: cairn-sweep-faults [--corrupt-check N] [--corrupt-elements N] [--ranks-per-node N] [--mpi-count-limit N]
//        [--term-after-sizes N] [--kill-after-sizes N] <cairn-sweep arguments>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sweep.h"

int main(int argc, char** argv) {
  cairn::sweep::SweepFaults faults;
  std::vector<char*> rest{argv[0]};
  int i = 1;
  for (; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (name == "--corrupt-check") faults.corrupt_check = value;
    else if (name == "--ranks-per-node") faults.ranks_per_node = static_cast<int>(value);
    else if (name == "--mpi-count-limit") faults.mpi_count_limit = static_cast<uint64_t>(value);
    else if (name == "--term-after-sizes") faults.term_after_sizes = value;
    else if (name == "--kill-after-sizes") faults.kill_after_sizes = value;
    else if (name == "--corrupt-elements") faults.corrupt_elements = value;
    else break;  // the first cairn-sweep argument
  }
  for (; i < argc; ++i) rest.push_back(argv[i]);
  rest.push_back(nullptr);  // argv's terminator, which MPI_Init may rely on
  return cairn::sweep::sweep_main(static_cast<int>(rest.size()) - 1, rest.data(), faults);
}
