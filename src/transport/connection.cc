#include "meshcomm/connection.hpp"

namespace meshcomm {

const char* transportName(Transport t) {
  switch (t) {
    case Transport::CudaIpc:
      return "CudaIpc";
    case Transport::Tcp:
      return "Tcp";
  }
  return "unknown";
}

}  // namespace meshcomm
