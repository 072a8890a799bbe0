// The built-in algorithms as a collection: what every Comm registers at construction (in this order, the
// selector's fallback preference), for tools and bindings that list or pick algorithms without a Comm.
#pragma once

#include "meshcomm/algorithm.hpp"

namespace meshcomm {

// Fresh instances, not initialised: an Algorithm reserves its regions when a Comm initialises it, so these
// describe the algorithms (name, collective); Comm::run executes a Comm's own instance of the same name.
// Needs no GPU.
AlgorithmCollection builtinAlgorithms();

}  // namespace meshcomm
