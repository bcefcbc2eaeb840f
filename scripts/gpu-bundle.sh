#!/usr/bin/env bash
# Packs the CUDA build of cairn for a GPU machine that has CUDA, cuBLAS, NCCL and Python but none of our Debian
# libraries (the lent H200 machine): builds here with -DCAIRN_CUDA=ON for one architecture, then collects the tools,
# the gpu test programs, the GPU benchmark, every shared library they load that is not the C/C++ runtime or CUDA's
# (Open MPI with its plugins and help files, HDF5, OpenBLAS, Boost.Test, toml++, ...), and the fortunes texts the
# GPU checks train on, into one tar.xz, with env.sh (libraries, CUDA's directories, Open MPI), GIT_SHA, ARCH and
# CUDA_RUNTIME (the toolkit's version, which the driver must support). bench/gpu_session.sh unpacks it there and runs
# every GPU check.
# Usage: scripts/gpu-bundle.sh [out.tar.xz]   (default .gpu-carry/cairn-gpu-bundle.tar.xz; .gpu-carry/ is ignored
#        by git, name it in the device tool's `carry`). env: ARCH=90, BUILD=build-gpu-bundle, JOBS=nproc
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu-carry/cairn-gpu-bundle.tar.xz}
ARCH=${ARCH:-90}
BUILD=${BUILD:-$root/build-gpu-bundle}
JOBS=${JOBS:-$(nproc)}
targets=(cairn-train cairn-reshard cairn-sweep cairn-eval cairn-plan kernels_cuda gpt_cuda kernels_ops kernels_gpu_gpt_bench)

echo "gpu-bundle: building sm_$ARCH in $BUILD" >&2
mkdir -p "$BUILD"
cmake -S "$root" -B "$BUILD" -DCAIRN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_BUILD_TYPE=Release \
  >"$BUILD/gpu-bundle-configure.log" 2>&1 || { cat "$BUILD/gpu-bundle-configure.log" >&2; exit 1; }
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >"$BUILD/gpu-bundle-build.log" 2>&1 \
  || { tail -40 "$BUILD/gpu-bundle-build.log" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/cairn-gpu-bundle
mkdir -p "$b/bin" "$b/tests" "$b/lib" "$b/openmpi/lib" "$b/pmix" "$b/data"
cp "$BUILD"/bin/cairn-{train,reshard,sweep,eval,plan} "$b/bin/"
# mpirun (Open MPI's orterun) for the multi-rank GPU checks, relocated like the rest (env.sh: plm isolated, so it
# forks the ranks itself and needs no ssh/rsh).
cp -L "$(command -v orterun || command -v mpirun)" "$b/bin/mpirun"
for t in kernels_cuda gpt_cuda kernels_ops kernels_gpu_gpt_bench; do
  f=$(find "$BUILD/tests" "$BUILD/bench" -name "$t" -type f -perm -u+x | head -1)
  [[ -n $f ]] || { echo "gpu-bundle: $t was not built" >&2; exit 1; }
  cp "$f" "$b/tests/"
done

# Open MPI loads its components (and PMIx its own) with dlopen at run time: they travel too, with what they load.
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
cp -a "$ompi_plugins" "$b/openmpi/lib/"
[[ -d $pmix_plugins ]] && cp -a "$pmix_plugins/." "$b/pmix/"
cp -a /usr/share/openmpi "$b/openmpi/share"

# Every shared library the programs and plugins load, except the C/C++ runtime (present on any Linux with a
# compiler) and CUDA's own libraries (the GPU machine's must match its driver).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libcublasLt\.|libnccl\.|libnvidia)'
for f in "$b"/bin/* "$b"/tests/* $(find "$b/openmpi/lib" "$b/pmix" -name '*.so'); do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$b/lib/$name"
done

# Data for bench/train_gpu_check.sh and the session's eval/sweep runs.
cp /usr/share/games/fortunes/{fortunes,science} "$b/data/"

# Environment for the unpacked bundle: its libraries first, then the machine's CUDA libraries where they usually are
# (scripts/gpu-cuda-libs.sh, copied in as cuda-libs.sh: $CUDA_HOME/lib64, /usr/local/cuda/lib64 and lib, PyTorch's
# pip nvidia/*/lib), Open MPI and PMIx relocated to it, and MPI started as a singleton without orted (one rank per
# process: the machine has one GPU), or by bin/mpirun on this node only.
cp "$root/scripts/gpu-cuda-libs.sh" "$b/cuda-libs.sh"
cat >"$b/env.sh" <<'EOF'
# source this: the bundle's libraries, then the machine's CUDA libraries, and Open MPI relocated to the unpacked folder
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$bundle/cuda-libs.sh"
cairn_cuda_lib_path "$bundle/lib"  # LD_LIBRARY_PATH, CAIRN_CUDA_LIB_DIRS, CAIRN_TORCH_PYTHON
export OPAL_PKGLIBDIR=$bundle/openmpi/lib/openmpi3 OPAL_PKGDATADIR=$bundle/openmpi/share
export OMPI_MCA_mca_base_component_path=$bundle/openmpi/lib/openmpi3 PMIX_MCA_mca_base_component_path=$bundle/pmix
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl='^ofi' OMPI_MCA_pml=ob1
export OMPI_MCA_plm=isolated  # the bundle's bin/mpirun: ranks on this node only, no ssh/rsh agent needed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CAIRN_BUNDLE_BIN=$bundle/bin CAIRN_BUNDLE_TESTS=$bundle/tests CAIRN_BUNDLE_DATA=$bundle/data
EOF
# The commit built, "-dirty" when tracked files differed from it (bench/gpu_session.sh says STALE BUNDLE when this is
# not the tree it runs from), and the CUDA runtime it links (the session checks the driver against it).
sha=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
[[ $sha != unknown ]] && ! git -C "$root" diff --quiet HEAD -- 2>/dev/null && sha+=-dirty
echo "$sha" >"$b/GIT_SHA"
echo "sm_$ARCH" >"$b/ARCH"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)  # what cmake/CairnCuda.cmake finds
"$nvcc_bin" --version 2>/dev/null | grep -o 'release [0-9]*\.[0-9]*' | cut -d' ' -f2 >"$b/CUDA_RUNTIME" || true

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out.tmp" cairn-gpu-bundle
mv "$out.tmp" "$out"
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1); unpacked $(du -sh "$b" | cut -f1))" >&2
