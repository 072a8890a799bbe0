// Agreement on the selection table: all ranks of a communicator must select with the same table, so at Comm
// creation they all-gather a SipHash of their table's canonical form (Selector::toJson) and all fail, naming
// the ranks that differ, when the hashes are not the same everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/selector.hpp"

namespace meshcomm {

// One rank's table as the agreement sees it.
struct TableDigest {
  uint64_t hash = 0;    // selectionTableHash of the rank's table
  uint64_t loaded = 0;  // 0: the rank could not load its table (hash unused)

  bool operator==(const TableDigest& o) const { return loaded == o.loaded && (!loaded || hash == o.hash); }
};

// SipHash-2-4 of the canonical form: tables that differ only in layout, field order or spelled-out
// defaults hash alike.
uint64_t selectionTableHash(const Selector& selector);

// Every rank's digest, `mine` at this rank's index: a bootstrap allGather, so every rank must call it.
std::vector<TableDigest> gatherTableDigests(Bootstrap& bootstrap, const TableDigest& mine);

// Throws Error(InvalidUsage) when the digests are not all equal, naming this rank, the ranks whose table
// differs from this rank's and every group of ranks with its hash (or the ranks that could not load theirs).
void checkTableDigests(int rank, const std::vector<TableDigest>& digests);

// The table `load` gives this rank, once every rank has shown its table's digest (every rank joins the
// all-gather whether or not its table loaded). Throws this rank's load error (naming the rank), or the
// error of checkTableDigests.
Selector loadAgreedSelector(Bootstrap& bootstrap, const std::function<Selector()>& load);

}  // namespace meshcomm
