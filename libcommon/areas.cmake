# Links between libcommon areas and to the kernels, included by libcommon/CMakeLists.txt.
# The kernels (backend table, OpenBLAS; with CUDA the cuBLAS backend and the CUDA runtime) go only
# into the areas whose sources call them, so tools that use neither (plan, report, reshard) do not
# load them: gpt (the model runs on a kernels::Backend) and gpu (device binding, the CUDA backend's
# allocator figures).
foreach(area gpt gpu)
  if(TARGET cairn_${area})
    target_link_libraries(cairn_${area} PUBLIC cairn_kernels)
  endif()
endforeach()
# checkpoint's interface (cairn/checkpoint.h) is written in gpt's types (GptConfig, TensorInfo).
if(TARGET cairn_checkpoint AND TARGET cairn_gpt)
  target_link_libraries(cairn_checkpoint PUBLIC cairn_gpt)
endif()
# checkpoint writes and checks its DONE marker through the records (cairn/records.h).
if(TARGET cairn_checkpoint AND TARGET cairn_records)
  target_link_libraries(cairn_checkpoint PUBLIC cairn_records)
endif()
# costmodel writes plans.json rows and reads fabric.toml fits through the records (cairn/records.h).
if(TARGET cairn_costmodel AND TARGET cairn_records)
  target_link_libraries(cairn_costmodel PUBLIC cairn_records)
endif()
# tokenizer's normalizers (NFC, NFKC, Lowercase, ...) use utf8proc's Unicode tables.
if(TARGET cairn_tokenizer)
  target_link_libraries(cairn_tokenizer PRIVATE PkgConfig::UTF8PROC)
  cairn_optimize_when_sanitized(cairn_tokenizer)
endif()
# gpu's NCCL bootstrap (nccl.cpp, nccl_comm_from_mpi) calls NCCL when the build has CUDA.
if(CAIRN_HAVE_CUDA AND TARGET cairn_gpu AND TARGET cairn_nccl)
  target_link_libraries(cairn_gpu PUBLIC cairn_nccl)
endif()
