// cairn-reshard with injected faults, for tests/reshard/mix.sh and safety.sh only (never installed): the tool's own
// command line (reshard_main) with a ReshardFaults taken from leading options, so the real binary carries no test
// hooks. Usage: cairn-reshard-faults [--free-disk-bytes N] [--verify-after-open CMD] <cairn-reshard arguments>
#include <cstdlib>
#include <string>
#include <vector>

#include "reshard.h"

int main(int argc, char** argv) {
  cairn::reshard::ReshardFaults faults;
  std::vector<char*> rest{argv[0]};
  int i = 1;
  for (; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    if (name == "--free-disk-bytes") faults.free_disk_bytes = std::strtod(argv[i + 1], nullptr);
    else if (name == "--verify-after-open") faults.verify_after_open = argv[i + 1];
    else break;  // the first cairn-reshard argument
  }
  for (; i < argc; ++i) rest.push_back(argv[i]);
  rest.push_back(nullptr);  // argv's terminator, which MPI_Init may rely on
  return cairn::reshard::reshard_main(static_cast<int>(rest.size()) - 1, rest.data(), faults);
}
