// Entry point of meshcomm_gpu_tests: one process per GPU, started by meshcomm-run (or torchrun/mpirun).
//   meshcomm-run -n 2 -- build/tests/meshcomm_gpu_tests [gtest flags]
// Exits 77 (ctest: skipped) with a printed reason when the host has fewer GPUs than local ranks, or when it
// runs as a single rank. See gpu_test_env.hpp for how the ranks stay in step.
#include "gpu_test_env.hpp"

int main(int argc, char** argv) {
  return meshcomm::test::runGpuTests(argc, argv);
}
