int cairn_kernels_placeholder() { return 0; }
