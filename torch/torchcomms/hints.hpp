// torchcomms hints for meshcomm: string key/value pairs a communicator (new_comm(hints=...), split) or one op
// (all_reduce(..., hints=...)) passes to the backend. torchcomms hands every hint to whichever backend runs
// (its own conformance tests pass free-form ones), so meshcomm reads the keys addressed to it:
//   scratch_bytes, packet_bytes, channels_per_peer   the Comm's sizes (CommResourcesConfig; 0 or absent: the
//                                                    MESHCOMM_* defaults), on a communicator
//   persistent_store                                 "true"/"false": whether the store outlives init
//   (meshcomm
//                                                    uses it during init only, so either is fine)
// A key with the prefix "meshcomm::" is addressed to meshcomm: an unknown one is an error naming it (ops take
// none today). A key without a prefix that meshcomm does not know belongs to another backend or to
// torchcomms: it is ignored, with one warning per key and process.
#pragma once

#include <string>
#include <unordered_map>

#include "dtypes.hpp"
#include "meshcomm/comm_resources.hpp"

namespace meshcomm::torch_backend {

using Hints = std::unordered_map<std::string, std::string>;

struct CommSettings {
  CommResourcesConfig resources;
};

// The settings a communicator's hints ask for; throws c10::Error naming rank, the hint and why.
CommSettings commSettings(int rank, const Hints& hints);

// Throws c10::Error naming rank, op and the first hint when an op is given any.
void checkOpHints(const OpContext& ctx, const Hints& hints);

}  // namespace meshcomm::torch_backend
