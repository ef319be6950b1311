# The GPU backend plug-ins. Both compile the same kernel source (src/backends/gpu/) with their vendor's
# compiler and add their vendor glue (src/backends/cuda/ or src/backends/rocm/). Each becomes a shared library
# next to the executables, loaded at run time only when its vendor runtime is present.

file(GLOB RBEE_GPU_COMMON_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/backends/gpu/*.cu ${PROJECT_SOURCE_DIR}/src/backends/gpu/kernels/*.cu)
# A plug-in compiles with the include roots of its layers only (cmake/layers.txt: the vendor glue and, through it,
# the kernel source, common, backend and core), so a kernel that includes another layer fails to compile.
rbee_layer_include_roots(vendor RBEE_GPU_PLUGIN_ROOTS)
list(TRANSFORM RBEE_GPU_PLUGIN_ROOTS PREPEND "-I" OUTPUT_VARIABLE RBEE_GPU_PLUGIN_INCLUDE_FLAGS)

# ---- CUDA (nvcc) --------------------------------------------------------------------------------------------
if(RBEE_CUDA)
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag yet.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  find_package(CUDAToolkit REQUIRED)
  file(GLOB RBEE_CUDA_GLUE CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/cuda/*.cu)
  add_library(rbee_backend_cuda SHARED ${RBEE_GPU_COMMON_SOURCES} ${RBEE_CUDA_GLUE})
  set_target_properties(rbee_backend_cuda PROPERTIES
    CUDA_ARCHITECTURES "${RBEE_CUDA_ARCHS}"
    CUDA_STANDARD 20
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  target_include_directories(rbee_backend_cuda PRIVATE ${RBEE_GPU_PLUGIN_ROOTS})
  # fmt 9's consteval format-string checks do not survive nvcc's C++20 front end: check them at run time.
  target_compile_definitions(rbee_backend_cuda PRIVATE FMT_CONSTEVAL= FMT_USE_CONSTEXPR=1)
  target_compile_options(rbee_backend_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcudafe=--diag_suppress=20012 -lineinfo>)
  # Static cudart: the plug-in then needs only the driver (libcuda) and cuBLAS at run time.
  target_link_libraries(rbee_backend_cuda PRIVATE rbee_engine CUDA::cudart_static CUDA::cublas CUDA::cublasLt)
endif()

# ---- ROCm (hipcc) -------------------------------------------------------------------------------------------
# CMake's HIP language does not find Debian's HIP layout, so hipcc compiles each source through a custom
# command and the objects are linked into the plug-in with the host linker.
if(RBEE_HIP)
  find_program(RBEE_HIPCC hipcc REQUIRED)
  file(GLOB RBEE_ROCM_GLUE CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/rocm/*.cpp)
  set(hip_arch_flags "")
  foreach(arch IN LISTS RBEE_HIP_TARGETS)
    list(APPEND hip_arch_flags --offload-arch=${arch})
  endforeach()
  get_target_property(fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  set(hip_objects "")
  foreach(src IN LISTS RBEE_GPU_COMMON_SOURCES RBEE_ROCM_GLUE)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    string(REPLACE "/" "_" obj_name ${rel})
    set(obj ${CMAKE_BINARY_DIR}/hip_objects/${obj_name}.o)
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/hip_objects
      COMMAND ${RBEE_HIPCC} -x hip ${hip_arch_flags} -std=c++20 -O2 -fPIC -DRBEE_GPU_HIP -DNDEBUG
              -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DFMT_SHARED
              ${RBEE_GPU_PLUGIN_INCLUDE_FLAGS} -Wno-unused-result
              -MD -MF ${obj}.d -c ${src} -o ${obj}
      DEPFILE ${obj}.d
      DEPENDS ${src}
      COMMENT "hipcc ${rel} (${RBEE_HIP_TARGETS})"
      VERBATIM)
    list(APPEND hip_objects ${obj})
  endforeach()
  add_library(rbee_backend_rocm SHARED ${hip_objects})
  set_target_properties(rbee_backend_rocm PROPERTIES LINKER_LANGUAGE CXX LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  find_library(RBEE_AMDHIP64 amdhip64 REQUIRED)
  target_link_libraries(rbee_backend_rocm PRIVATE rbee_engine ${RBEE_AMDHIP64} ${CMAKE_DL_LIBS})
endif()

# ---- GPU op microbenchmarks ----------------------------------------------------------------------------------
# A plain program (prints a table) next to the plug-ins, which it loads at run time like the workers do.
if((RBEE_CUDA OR RBEE_HIP) AND RBEE_BUILD_BENCH)
  add_executable(rbee_bench_gpu ${PROJECT_SOURCE_DIR}/bench/gpu/bench_gpu_ops.cpp)
  target_link_libraries(rbee_bench_gpu PRIVATE rbee_engine)
  set_target_properties(rbee_bench_gpu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(RBEE_CUDA)
    add_dependencies(rbee_bench_gpu rbee_backend_cuda)
  endif()
  if(RBEE_HIP)
    add_dependencies(rbee_bench_gpu rbee_backend_rocm)
  endif()
endif()
