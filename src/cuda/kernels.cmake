# Copy kernels of the CUDA layer (included by the top-level CMakeLists.txt after
# egm_cuda is defined). With nvcc: src/cuda/kernels.cu -> a fatbin for sm_90,
# sm_100 and compute_100 PTX -> a C array egm__kernels_fatbin[] compiled into
# egm_cuda (EGM_HAVE_KERNELS=1). Without nvcc the array is empty
# (EGM_HAVE_KERNELS=0) and batches of many blocks use cuMemcpyBatchAsync.
# The driver itself is never linked: it is loaded at run time (driver.c).

find_program(NVCC nvcc HINTS /usr/local/cuda/bin /usr/local/cuda-13.0/bin)
if(NVCC)
  set(_egm_kernels_default ON)
else()
  set(_egm_kernels_default OFF)
endif()
option(EGM_CUDA_KERNELS "Build the CUDA copy kernels with nvcc (default ON when nvcc is found)"
       ${_egm_kernels_default})

set(EGM_CUDA_GEN_DIR ${CMAKE_BINARY_DIR}/gen/cuda)
file(MAKE_DIRECTORY ${EGM_CUDA_GEN_DIR})

if(EGM_CUDA_KERNELS AND NVCC)
  set(EGM_KERNELS_C ${EGM_CUDA_GEN_DIR}/kernels_fatbin.c)
  set(EGM_KERNELS_FATBIN ${EGM_CUDA_GEN_DIR}/kernels.fatbin)
  add_custom_command(
    OUTPUT ${EGM_KERNELS_FATBIN}
    COMMAND ${NVCC} -fatbin
            -gencode arch=compute_90,code=sm_90
            -gencode arch=compute_100,code=sm_100
            -gencode arch=compute_100,code=compute_100
            -O3 -o ${EGM_KERNELS_FATBIN} ${CMAKE_SOURCE_DIR}/src/cuda/kernels.cu
    DEPENDS ${CMAKE_SOURCE_DIR}/src/cuda/kernels.cu
    COMMENT "nvcc src/cuda/kernels.cu -> kernels.fatbin (sm_90, sm_100, compute_100)"
    VERBATIM)
  add_custom_command(
    OUTPUT ${EGM_KERNELS_C}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${EGM_KERNELS_FATBIN} -DOUTPUT=${EGM_KERNELS_C}
            -P ${CMAKE_SOURCE_DIR}/src/cuda/embed_fatbin.cmake
    DEPENDS ${EGM_KERNELS_FATBIN} ${CMAKE_SOURCE_DIR}/src/cuda/embed_fatbin.cmake
    COMMENT "embedding kernels.fatbin"
    VERBATIM)
  target_compile_definitions(egm_cuda PRIVATE EGM_HAVE_KERNELS=1)
  message(STATUS "CUDA copy kernels: built with ${NVCC}")
else()
  # Written at configure time (another name than the generated one, so that
  # switching the option never leaves a stale file behind).
  set(EGM_KERNELS_C ${EGM_CUDA_GEN_DIR}/kernels_none.c)
  execute_process(COMMAND ${CMAKE_COMMAND} -DOUTPUT=${EGM_KERNELS_C}
                  -P ${CMAKE_SOURCE_DIR}/src/cuda/embed_fatbin.cmake)
  target_compile_definitions(egm_cuda PRIVATE EGM_HAVE_KERNELS=0)
  message(STATUS "CUDA copy kernels: not built (nvcc not found or EGM_CUDA_KERNELS=OFF); "
                 "batches will use cuMemcpyBatchAsync")
endif()
target_sources(egm_cuda PRIVATE ${EGM_KERNELS_C})
