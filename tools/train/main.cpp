// cairn-train: trains a GPT model on cairn shards (CPU or CUDA; data, tensor, sequence and pipeline parallel, ZeRO
// 0-3), with exact resume.
#include "trainer.h"

int main(int argc, char** argv) { return cairn::train::train_main(argc, argv); }
