// UniqueId, RankEnv, Bootstrap and TcpBootstrap (include/meshcomm/bootstrap.hpp). Every call that waits on
// peers releases the GIL, so ranks driven by threads of one process make progress.
#include <nanobind/stl/array.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::python {

namespace {

UniqueId uniqueIdFromBytes(const nb::bytes& data) {
  UniqueId id;
  MESHCOMM_REQUIRE(data.size() == id.bytes.size(), "UniqueId: expected ", id.bytes.size(), " bytes, got ",
                   data.size());
  std::memcpy(id.bytes.data(), data.c_str(), id.bytes.size());
  return id;
}

nb::bytes uniqueIdBytes(const UniqueId& id) {
  return nb::bytes(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}

std::array<uint8_t, 16> secretFromBytes(const nb::bytes& data) {
  std::array<uint8_t, 16> secret{};
  MESHCOMM_REQUIRE(data.size() == secret.size(), "TcpBootstrap.unique_id_from_address: the secret must be ",
                   secret.size(), " bytes, got ", data.size());
  std::memcpy(secret.data(), data.c_str(), secret.size());
  return secret;
}

void bindUniqueId(nb::module_& m) {
  nb::class_<UniqueId>(
      m, "UniqueId",
      "128 opaque bytes naming a bootstrap rendezvous and its secret: pass them to every rank "
      "(bytes(uid) / UniqueId(data), or pickle)")
      .def(nb::init<>(), "An all-zero id (not valid for a rendezvous)")
      .def(
          "__init__",
          [](UniqueId* self, const nb::bytes& data) { new (self) UniqueId(uniqueIdFromBytes(data)); },
          nb::arg("data"))
      .def_static("from_bytes", &uniqueIdFromBytes, nb::arg("data"))
      .def("__bytes__", &uniqueIdBytes)
      .def("__eq__", [](const UniqueId& a, const UniqueId& b) { return a.bytes == b.bytes; })
      .def("__hash__", [](const UniqueId& id) { return nb::hash(uniqueIdBytes(id)); })
      .def("__repr__",
           [](const UniqueId&) { return std::string("<meshcomm.UniqueId: 128 bytes, secret hidden>"); })
      .def("__getstate__", &uniqueIdBytes)
      .def("__setstate__",
           [](UniqueId& self, const nb::bytes& state) { new (&self) UniqueId(uniqueIdFromBytes(state)); });
}

void bindRankEnv(nb::module_& m) {
  nb::class_<RankEnv>(m, "RankEnv",
                      "The rank layout of this process from torchrun, OpenMPI or Slurm variables")
      .def_static("from_env", &RankEnv::fromEnvironment)
      .def_ro("rank", &RankEnv::rank)
      .def_ro("world_size", &RankEnv::worldSize)
      .def_ro("local_rank", &RankEnv::localRank)
      .def_ro("local_world_size", &RankEnv::localWorldSize)
      .def_ro("source", &RankEnv::source)
      .def("__repr__", [](const RankEnv& e) {
        return "RankEnv(rank=" + std::to_string(e.rank) + ", world_size=" + std::to_string(e.worldSize) +
               ", local_rank=" + std::to_string(e.localRank) +
               ", local_world_size=" + std::to_string(e.localWorldSize) + ", source='" + e.source + "')";
      });
}

void bindBootstrapBase(nb::module_& m) {
  nb::class_<Bootstrap>(m, "Bootstrap", "The host control plane between ranks (tagged messages, collectives)")
      .def_prop_ro("rank", &Bootstrap::rank)
      .def_prop_ro("size", &Bootstrap::size)
      .def_prop_ro("n_ranks_per_node", &Bootstrap::nRanksPerNode)
      .def_prop_ro("local_rank", &Bootstrap::localRank)
      .def("host_id", &Bootstrap::hostId, nb::arg("rank"))
      .def(
          "send",
          [](Bootstrap& b, const nb::bytes& data, int peer, int tag) {
            std::string copy(data.c_str(), data.size());
            nb::gil_scoped_release release;
            b.send(copy.data(), copy.size(), peer, tag);
          },
          nb::arg("data"), nb::arg("peer"), nb::arg("tag"),
          "Sends bytes to `peer` on `tag` (>= 0); the peer must recv exactly that many bytes")
      .def(
          "recv",
          [](Bootstrap& b, size_t nbytes, int peer, int tag) {
            std::string buffer(nbytes, '\0');
            {
              nb::gil_scoped_release release;
              b.recv(buffer.data(), nbytes, peer, tag);
            }
            return nb::bytes(buffer.data(), buffer.size());
          },
          nb::arg("nbytes"), nb::arg("peer"), nb::arg("tag"))
      .def(
          "all_gather",
          [](Bootstrap& b, const nb::bytes& data) {
            const size_t per = data.size();
            const int n = b.size();
            std::string all(per * static_cast<size_t>(n), '\0');
            std::memcpy(all.data() + per * static_cast<size_t>(b.rank()), data.c_str(), per);
            {
              nb::gil_scoped_release release;
              b.allGather(all.data(), per);
            }
            nb::list out;
            for (int r = 0; r < n; ++r) out.append(nb::bytes(all.data() + per * static_cast<size_t>(r), per));
            return out;
          },
          nb::arg("data"),
          "Every rank passes the same number of bytes; returns every rank's data, in rank order")
      .def(
          "broadcast",
          [](Bootstrap& b, const nb::bytes& data, int root) {
            std::string buffer(data.c_str(), data.size());
            {
              nb::gil_scoped_release release;
              b.broadcast(buffer.data(), buffer.size(), root);
            }
            return nb::bytes(buffer.data(), buffer.size());
          },
          nb::arg("data"), nb::arg("root"),
          "Every rank passes the same number of bytes; returns the root's (other ranks' contents are "
          "ignored)")
      .def("barrier", &Bootstrap::barrier, nb::call_guard<nb::gil_scoped_release>());
}

void bindTcpBootstrap(nb::module_& m) {
  nb::class_<TcpBootstrap, Bootstrap>(m, "TcpBootstrap",
                                      "Bootstrap over TCP, authenticated by the id's secret")
      .def(
          "__init__",
          [](TcpBootstrap* self, int rank, int nRanks, const UniqueId& id, double timeout) {
            nb::gil_scoped_release release;
            new (self) TcpBootstrap(rank, nRanks, id, timeout);
          },
          nb::arg("rank"), nb::arg("n_ranks"), nb::arg("unique_id"), nb::arg("timeout") = -1.0,
          "Rendezvous with every other rank (timeout in seconds; < 0: MESHCOMM_BOOTSTRAP_TIMEOUT)")
      .def_static(
          "from_env",
          []() {
            nb::gil_scoped_release release;
            return TcpBootstrap::fromEnvironment();
          },
          "RankEnv for rank and size; MESHCOMM_BOOTSTRAP_ADDR or MASTER_ADDR:MASTER_PORT+1 for the root; "
          "MESHCOMM_BOOTSTRAP_SECRET")
      .def_static("create_unique_id", &TcpBootstrap::createUniqueId, nb::arg("n_ranks") = 0,
                  "A fresh id; its rendezvous root runs on a thread of this process until every rank joined "
                  "(n_ranks 0: the size comes from the first rank)")
      .def_static(
          "unique_id_from_address",
          [](const std::string& hostPort, const nb::bytes& secret) {
            return TcpBootstrap::uniqueIdFromAddress(hostPort, secretFromBytes(secret));
          },
          nb::arg("host_port"), nb::arg("secret"), "An id for a fixed 'host:port' root (rank 0 hosts it)");
}

}  // namespace

void bindBootstrap(nb::module_& m) {
  bindUniqueId(m);
  bindRankEnv(m);
  bindBootstrapBase(m);
  bindTcpBootstrap(m);
}

}  // namespace meshcomm::python
