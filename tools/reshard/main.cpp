// cairn-reshard: raw text -> balanced, checksummed token shards; M -> N shards; Megatron/llm.c
// conversion; weighted mixtures; verification and statistics (subcommands build, reshard, convert, mix,
// verify, stats).
#include "reshard.h"

int main(int argc, char** argv) { return cairn::reshard::reshard_main(argc, argv); }
