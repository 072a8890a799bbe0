// Agreement across the ranks of a communicator on something each rank loads alone (the selection table, the
// plans of a plan directory): at Comm creation every rank all-gathers a digest of what it loaded (a SipHash
// of a canonical form, or "could not load") and all fail, naming the ranks that differ, when the digests are
// not the same everywhere; so no rank selects or runs what another does not have.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error_message.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/selector.hpp"

namespace meshcomm {

// One rank's loaded object as the agreement sees it.
struct AgreementDigest {
  uint64_t hash = 0;    // the object's hash
  uint64_t loaded = 0;  // 0: the rank could not load it (hash unused)

  bool operator==(const AgreementDigest& o) const {
    return loaded == o.loaded && (!loaded || hash == o.hash);
  }
};

// What is agreed on, for the messages: "<name> agreement: ranks 2, 3 did not load <thing> this rank loaded
// (...); <remedy>".
struct AgreementSubject {
  std::string name;    // "selection table"
  std::string thing;   // "the table"
  std::string remedy;  // "set the same MESHCOMM_ALGO_TABLE on every rank"
};

// Every rank's digest, `mine` at this rank's index: a bootstrap allGather, so every rank must call it.
std::vector<AgreementDigest> gatherDigests(Bootstrap& bootstrap, const AgreementDigest& mine);

// Throws Error(InvalidUsage) when the digests are not all equal, naming this rank, the ranks whose digest
// differs from this rank's and every group of ranks with its hash (or the ranks that could not load theirs);
// the message is bounded in length.
void checkDigests(int rank, const std::vector<AgreementDigest>& digests, const AgreementSubject& subject);

// What `load` gives this rank, once every rank has shown its digest (every rank joins the all-gather whether
// or not its load succeeded). Throws this rank's load error (naming the rank), or the error of checkDigests.
template <typename T>
T loadAgreed(Bootstrap& bootstrap, const std::function<T()>& load,
             const std::function<uint64_t(const T&)>& hashOf, const AgreementSubject& subject) {
  std::optional<T> loaded;
  std::optional<Error> loadError;
  try {
    loaded = load();
  } catch (const Error& e) {
    loadError = e;
  }
  const AgreementDigest mine{loaded ? hashOf(*loaded) : 0, loaded ? 1u : 0u};
  const std::vector<AgreementDigest> digests = gatherDigests(bootstrap, mine);
  if (loadError) {
    throw Error(loadError->code(),
                detail::concat("rank ", bootstrap.rank(), ": creating the Comm: ", messageOf(*loadError)));
  }
  checkDigests(bootstrap.rank(), digests, subject);
  return std::move(*loaded);
}

// The selection table: SipHash-2-4 of its canonical form (Selector::toJson), so tables that differ only in
// layout, field order or spelled-out defaults hash alike.
uint64_t selectionTableHash(const Selector& selector);
extern const AgreementSubject kSelectionTableAgreement;

// The table `load` gives this rank, agreed on by every rank (loadAgreed with selectionTableHash).
Selector loadAgreedSelector(Bootstrap& bootstrap, const std::function<Selector()>& load);

}  // namespace meshcomm
