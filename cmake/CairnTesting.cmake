# cairn_add_test(): one Boost.Test executable registered with ctest, optionally run under mpirun.
find_package(Boost REQUIRED COMPONENTS unit_test_framework)
find_program(CAIRN_MPIEXEC NAMES mpirun mpiexec)

# cairn_add_test(NAME name SOURCES a.cpp ... LIBS lib ... LABELS unit ... [NP 1 2 4] [TIMEOUT s] [MPI_SESSION])
# With NP, one ctest entry per rank count: name_np2 runs `mpirun -np 2 --oversubscribe exe`. MPI_SESSION marks a
# test run without mpirun that still starts MPI (a singleton mpi::Session), for the sanitizer settings below.
function(cairn_add_test)
  cmake_parse_arguments(T "MPI_SESSION" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;NP" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} Boost::unit_test_framework cairn_warnings)
  target_compile_definitions(${T_NAME} PRIVATE BOOST_TEST_DYN_LINK)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(env "BOOST_TEST_COLOR_OUTPUT=no;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;CAIRN_SOURCE_DIR=${PROJECT_SOURCE_DIR};CAIRN_BUILD_DIR=${PROJECT_BINARY_DIR};OMP_NUM_THREADS=1")
  if(CAIRN_SANITIZE AND (T_NP OR T_MPI_SESSION))
    # Open MPI's dlopened components keep allocations past MPI_Finalize by design; LeakSanitizer
    # cannot attribute them to a library name, so leak checking is off for MPI runs (ASan stays on).
    list(APPEND env "ASAN_OPTIONS=detect_leaks=0")
  endif()
  if(T_NP)
    foreach(np ${T_NP})
      add_test(NAME ${T_NAME}_np${np}
        COMMAND ${CAIRN_MPIEXEC} -np ${np} --oversubscribe $<TARGET_FILE:${T_NAME}>)
      set_tests_properties(${T_NAME}_np${np} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
        ENVIRONMENT "${env}" PROCESSORS 1)
    endforeach()
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${env}")
  endif()
endfunction()

# cairn_add_script_test(NAME name COMMAND ... LABELS ...): a shell/python test run from the source dir.
function(cairn_add_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "BOOST_TEST_COLOR_OUTPUT=no;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;CAIRN_SOURCE_DIR=${PROJECT_SOURCE_DIR};CAIRN_BUILD_DIR=${PROJECT_BINARY_DIR};CAIRN_BIN_DIR=${PROJECT_BINARY_DIR}/bin;OMP_NUM_THREADS=1")
endfunction()
