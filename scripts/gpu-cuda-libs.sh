# shellcheck shell=bash
# Sourced, not run: cairn_cuda_lib_path BUNDLE_LIB puts the usual CUDA library directories on LD_LIBRARY_PATH right
# after BUNDLE_LIB (the GPU bundle's lib/), so that the bundle's programs find libcudart and libnccl (linked) and cuBLAS
# (dlopened) on a GPU machine whose CUDA is not in the loader's default path:
#   $CUDA_HOME/lib64, /usr/local/cuda/lib64, /usr/local/cuda/lib, then the pip wheels' nvidia/*/lib (nvidia-cuda-
#   runtime, nvidia-nccl, nvidia-cublas, ...) next to the PyTorch of the first Python that has one ($PYTHON, python3,
#   /usr/bin/python3, /usr/local/bin/python3; found without importing torch).
# Only directories that exist, each once; BUNDLE_LIB stays first. Sets CAIRN_CUDA_LIB_DIRS (the directories added,
# colon-separated, "" when none) and CAIRN_TORCH_PYTHON (that Python, "" when none has PyTorch).
# One definition for both users: scripts/gpu-bundle.sh copies it into the bundle (cuda-libs.sh, sourced by env.sh), and
# bench/gpu_session.sh sources this file from the tree for a bundle made before it.
cairn_cuda_lib_path() {
  local bundle_lib=$1 d py site
  local -a dirs=() keep=()
  CAIRN_TORCH_PYTHON=
  for py in "${PYTHON:-}" python3 /usr/bin/python3 /usr/local/bin/python3; do
    [[ -n $py ]] && command -v "$py" >/dev/null 2>&1 || continue
    site=$("$py" -c 'import importlib.util as u, os
s = u.find_spec("torch")
print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else "")' 2>/dev/null) || site=
    if [[ -n $site ]]; then
      CAIRN_TORCH_PYTHON=$(command -v "$py")
      break
    fi
  done
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/lib ${site:+"$site"/nvidia/*/lib}; do
    [[ -d $d && " ${dirs[*]} " != *" $d "* ]] && dirs+=("$d")
  done
  # the rest of the current path, without the bundle's lib and the directories now placed before it
  local placed=" ${dirs[*]} " IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    [[ -n $d && $d != "$bundle_lib" && $placed != *" $d "* ]] && keep+=("$d")
  done
  CAIRN_CUDA_LIB_DIRS="${dirs[*]}"
  LD_LIBRARY_PATH=$bundle_lib${CAIRN_CUDA_LIB_DIRS:+:$CAIRN_CUDA_LIB_DIRS}${keep[0]:+:${keep[*]}}
  export LD_LIBRARY_PATH CAIRN_CUDA_LIB_DIRS CAIRN_TORCH_PYTHON
}
