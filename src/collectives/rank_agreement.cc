// Agreement across ranks (rank_agreement.hpp): the digests' all-gather and check, and the selection table's
// hash.
#include "collectives/rank_agreement.hpp"

#include <map>
#include <optional>
#include <utility>
#include <sstream>

#include "base/bounded_text.hpp"
#include "base/error_message.hpp"
#include "base/siphash.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

// A fixed key: the hash identifies a table, it does not authenticate it.
const SipKey kTableHashKey = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm', '.', 't', 'a', 'b', 'l', 'e', ' ', '1'};

// "rank 3" or "ranks 0, 2".
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

// The ranks of each distinct digest, in the order of their first rank.
std::vector<std::pair<AgreementDigest, std::vector<int>>> groupRanks(
    const std::vector<AgreementDigest>& digests) {
  std::vector<std::pair<AgreementDigest, std::vector<int>>> groups;
  std::map<std::pair<uint64_t, uint64_t>, size_t> index;  // (loaded, hash) -> group
  for (size_t r = 0; r < digests.size(); ++r) {
    const AgreementDigest& d = digests[r];
    const auto [it, added] = index.emplace(std::make_pair(d.loaded, d.loaded ? d.hash : 0), groups.size());
    if (added) groups.push_back({d, {}});
    groups[it->second].second.push_back(static_cast<int>(r));
  }
  return groups;
}

// "hash 0x1f on ranks 0, 1; could not load it on rank 2": every distinct digest with its ranks.
std::string describeGroups(const std::vector<AgreementDigest>& digests) {
  std::ostringstream os;
  const char* separator = "";
  for (const auto& [digest, ranks] : groupRanks(digests)) {
    os << separator;
    separator = "; ";
    if (digest.loaded) {
      os << "hash 0x" << std::hex << digest.hash << std::dec << " on ";
    } else {
      os << "could not load it on ";
    }
    os << rankList(ranks);
  }
  return os.str();
}

}  // namespace

uint64_t selectionTableHash(const Selector& selector) {
  const std::string canonical = selector.toJson();
  return sipHash24(kTableHashKey, canonical.data(), canonical.size());
}

const AgreementSubject kSelectionTableAgreement{"selection table", "the table",
                                                "set the same MESHCOMM_ALGO_TABLE on every rank"};

std::vector<AgreementDigest> gatherDigests(Bootstrap& bootstrap, const AgreementDigest& mine) {
  std::vector<AgreementDigest> digests(static_cast<size_t>(bootstrap.size()));
  digests[static_cast<size_t>(bootstrap.rank())] = mine;
  bootstrap.allGather(digests.data(), sizeof(AgreementDigest));
  return digests;
}

void checkDigests(int rank, const std::vector<AgreementDigest>& digests, const AgreementSubject& subject) {
  const AgreementDigest& mine = digests.at(static_cast<size_t>(rank));
  std::vector<int> differing;
  for (size_t r = 0; r < digests.size(); ++r)
    if (!(digests[r] == mine)) differing.push_back(static_cast<int>(r));
  if (differing.empty()) return;
  const std::string message =
      detail::concat("rank ", rank, ": ", subject.name, " agreement: ", rankList(differing), " did not load ",
                     subject.thing, " this rank loaded (", describeGroups(digests), "); ", subject.remedy);
  throw Error(ErrorCode::InvalidUsage, boundedText(message, kMaxErrorMessage));
}

Selector loadAgreedSelector(Bootstrap& bootstrap, const std::function<Selector()>& load) {
  return loadAgreed<Selector>(bootstrap, load, selectionTableHash, kSelectionTableAgreement);
}

}  // namespace meshcomm
