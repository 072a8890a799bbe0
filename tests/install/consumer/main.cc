// Uses the installed public headers and library: prints the env registry size and the GPU count.
#include <cstdio>

#include <meshcomm/core.hpp>

int main() {
  std::printf("meshcomm consumer: %zu env variables, %d GPUs\n", meshcomm::envRegistry().size(),
              meshcomm::gpuCount());
  return meshcomm::envRegistry().empty() ? 1 : 0;
}
