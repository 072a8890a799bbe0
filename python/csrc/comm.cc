// Comm: the collectives on raw device pointers and an integer cudaStream_t (include/meshcomm/comm.hpp).
// Pointers, streams and counts pass through unchanged; no copies, no host synchronisation.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <vector>

#include "bindings.hpp"
#include "meshcomm/plan_algorithm.hpp"
#include "comm_handle.hpp"
#include "meshcomm/native_algorithm.hpp"

namespace meshcomm::python {

namespace {

CommConfig makeConfig(int device, size_t scratchBytes, size_t packetBytes, int channelsPerPeer) {
  CommConfig config;
  config.cudaDevice = device;
  config.resources.scratchBytes = scratchBytes;
  config.resources.packetBytes = packetBytes;
  config.resources.channelsPerPeer = channelsPerPeer;
  return config;
}

void requireCounts(const Comm& comm, const std::vector<size_t>& counts, const char* name) {
  MESHCOMM_REQUIRE(counts.size() == static_cast<size_t>(comm.size()), "rank ", comm.rank(),
                   ": alltoallv: ", name, ": ", counts.size(), " entries, expected one per rank (",
                   comm.size(), ")");
}

// Binds Comm.__init__ and the collective-construction entry points.
void bindConstruction(nb::class_<CommHandle>& c) {
  c.def(
       "__init__",
       [](CommHandle* self, std::shared_ptr<Bootstrap> bootstrap, int device, size_t scratch, size_t packet,
          int channels) {
         std::unique_ptr<Comm> comm;
         {
           nb::gil_scoped_release release;
           comm = std::make_unique<Comm>(std::move(bootstrap), makeConfig(device, scratch, packet, channels));
         }
         new (self) CommHandle(std::move(comm));
       },
       nb::arg("bootstrap"), nb::arg("device") = -1, nb::arg("scratch_bytes") = 0,
       nb::arg("packet_bytes") = 0, nb::arg("channels_per_peer") = 0,
       "Collective: every rank of the bootstrap builds its Comm (device -1: the current device; 0 sizes: the "
       "MESHCOMM_* defaults)")
      .def_static(
          "from_env",
          [](int device, size_t scratch, size_t packet, int channels) {
            std::unique_ptr<Comm> comm;
            {
              nb::gil_scoped_release release;
              comm = Comm::fromEnvironment(makeConfig(device, scratch, packet, channels));
            }
            return new CommHandle(std::move(comm));
          },
          nb::arg("device") = -1, nb::arg("scratch_bytes") = 0, nb::arg("packet_bytes") = 0,
          nb::arg("channels_per_peer") = 0, nb::rv_policy::take_ownership,
          "TcpBootstrap.from_env(); device = LOCAL_RANK unless given")
      .def(
          "close",
          [](CommHandle& h) {
            nb::gil_scoped_release release;
            h.close();
          },
          "Collective teardown (every rank at the same point); later calls raise InvalidUsageError")
      .def_prop_ro("closed", [](CommHandle& h) { return h.closed(); })
      .def("__enter__", [](nb::handle self) { return self; })
      .def(
          "__exit__",
          [](CommHandle& h, nb::handle, nb::handle, nb::handle) {
            nb::gil_scoped_release release;
            h.close();
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

// Comm.add_algorithm: a fresh instance per Comm (an instance reserves the regions of the one Comm that
// initialised it). Built-in algorithms are on every Comm already.
void addAlgorithm(CommHandle& h, const std::shared_ptr<Algorithm>& algorithm) {
  h.run([&](Comm& comm) {
    MESHCOMM_REQUIRE(algorithm != nullptr, "rank ", comm.rank(), ": Comm.add_algorithm: algorithm is None");
    if (auto plan = std::dynamic_pointer_cast<PlanAlgorithm>(algorithm)) {
      comm.addAlgorithm(plan->freshInstance());
      return;
    }
    auto native = std::dynamic_pointer_cast<NativeAlgorithm>(algorithm);
    MESHCOMM_REQUIRE(native != nullptr, "rank ", comm.rank(), ": Comm.add_algorithm: algorithm: '",
                     algorithm->name(),
                     "' is not a native algorithm (compile_native) or a plan (PlanAlgorithm); built-in "
                     "algorithms are on every Comm");
    comm.addAlgorithm(native->freshInstance());
  });
}

void bindQueries(nb::class_<CommHandle>& c) {
  c.def_prop_ro("rank", [](CommHandle& h) { return h.run([](Comm& comm) { return comm.rank(); }); })
      .def_prop_ro("size", [](CommHandle& h) { return h.run([](Comm& comm) { return comm.size(); }); })
      .def_prop_ro("cuda_device",
                   [](CommHandle& h) { return h.run([](Comm& comm) { return comm.cudaDevice(); }); })
      .def_prop_ro(
          "algorithms", [](CommHandle& h) { return h.run([](Comm& comm) { return comm.algorithms(); }); },
          "A snapshot of the Comm's algorithm collection (its initialised instances)")
      .def("add_algorithm", &addAlgorithm, nb::arg("algorithm"),
           "Collective (every rank, same order): registers a fresh instance of a native algorithm "
           "(compile_native) or a plan (PlanAlgorithm) on this Comm and initialises it")
      .def(
          "register_buffer",
          [](CommHandle& h, uintptr_t ptr, size_t bytes) {
            return h.run(
                [&](Comm& comm) { return comm.registerBuffer(reinterpret_cast<void*>(ptr), bytes).index; });
          },
          nb::arg("ptr"), nb::arg("bytes"),
          "Collective (every rank, same order): registers [ptr, ptr + bytes) of this GPU's memory so "
          "zero-copy "
          "algorithms and plans reach it from the peers; returns the registration index (the same on every "
          "rank)")
      .def(
          "deregister_buffer",
          [](CommHandle& h, int32_t index) {
            h.run([&](Comm& comm) { comm.deregisterBuffer(BufferRegistration{index}); });
          },
          nb::arg("index"), "Collective: undoes register_buffer (waits for this GPU and every peer first)")
      .def(
          "check_error", [](CommHandle& h) { h.run([](Comm& comm) { comm.checkError(); }); },
          "Raises the first device-side error of this Comm (TimeoutError naming rank, peer and op)")
      .def(
          "abort", [](CommHandle& h) { h.run([](Comm& comm) { comm.abort(); }); },
          "Makes every device wait give up; close() then skips the agreement with the peers");
}

void bindReductions(nb::class_<CommHandle>& c) {
  c.def(
       "all_reduce",
       [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, ReduceOpSpec op,
          uintptr_t stream) {
         h.run([&](Comm& comm) {
           comm.allReduce(asPointer(send), asPointer(recv), count, dtype, op, asStream(stream));
         });
       },
       nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("op") = ReduceOpSpec(),
       nb::arg("stream") = 0)
      .def(
          "reduce_scatter",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t recvCount, DataType dtype, ReduceOpSpec op,
             uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.reduceScatter(asPointer(send), asPointer(recv), recvCount, dtype, op, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("recv_count"), nb::arg("dtype"),
          nb::arg("op") = ReduceOpSpec(), nb::arg("stream") = 0, "send holds size*recv_count elements")
      .def(
          "reduce",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, ReduceOpSpec op,
             int root, uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.reduce(asPointer(send), asPointer(recv), count, dtype, op, root, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"),
          nb::arg("op") = ReduceOpSpec(), nb::arg("root") = 0, nb::arg("stream") = 0,
          "recv is used on the root only (may be 0 elsewhere)");
}

void bindMovement(nb::class_<CommHandle>& c) {
  c.def(
       "all_gather",
       [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t sendCount, DataType dtype, uintptr_t stream) {
         h.run([&](Comm& comm) {
           comm.allGather(asPointer(send), asPointer(recv), sendCount, dtype, asStream(stream));
         });
       },
       nb::arg("send"), nb::arg("recv"), nb::arg("send_count"), nb::arg("dtype"), nb::arg("stream") = 0,
       "recv holds size*send_count elements")
      .def(
          "broadcast",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, int root,
             uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.broadcast(asPointer(send), asPointer(recv), count, dtype, root, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("root") = 0,
          nb::arg("stream") = 0)
      .def(
          "gather",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t sendCount, DataType dtype, int root,
             uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.gather(asPointer(send), asPointer(recv), sendCount, dtype, root, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("send_count"), nb::arg("dtype"), nb::arg("root") = 0,
          nb::arg("stream") = 0, "recv (size*send_count elements) on the root only")
      .def(
          "scatter",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t recvCount, DataType dtype, int root,
             uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.scatter(asPointer(send), asPointer(recv), recvCount, dtype, root, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("recv_count"), nb::arg("dtype"), nb::arg("root") = 0,
          nb::arg("stream") = 0, "send (size*recv_count elements) on the root only")
      .def(
          "all_to_all",
          [](CommHandle& h, uintptr_t send, uintptr_t recv, size_t countPerPeer, DataType dtype,
             uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.allToAll(asPointer(send), asPointer(recv), countPerPeer, dtype, asStream(stream));
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count_per_peer"), nb::arg("dtype"),
          nb::arg("stream") = 0)
      .def(
          "all_to_allv",
          [](CommHandle& h, uintptr_t send, const std::vector<size_t>& sendCounts,
             const std::vector<size_t>& sendDispls, uintptr_t recv, const std::vector<size_t>& recvCounts,
             const std::vector<size_t>& recvDispls, DataType dtype, uintptr_t stream) {
            h.run([&](Comm& comm) {
              requireCounts(comm, sendCounts, "send_counts");
              requireCounts(comm, sendDispls, "send_displs");
              requireCounts(comm, recvCounts, "recv_counts");
              requireCounts(comm, recvDispls, "recv_displs");
              comm.allToAllv(asPointer(send), sendCounts.data(), sendDispls.data(), asPointer(recv),
                             recvCounts.data(), recvDispls.data(), dtype, asStream(stream),
                             CountsLocation::Host);
            });
          },
          nb::arg("send"), nb::arg("send_counts"), nb::arg("send_displs"), nb::arg("recv"),
          nb::arg("recv_counts"), nb::arg("recv_displs"), nb::arg("dtype"), nb::arg("stream") = 0,
          "Counts and displacements: host lists of size ints (elements)")
      .def(
          "all_to_allv_device",
          [](CommHandle& h, uintptr_t send, uintptr_t sendCounts, uintptr_t sendDispls, uintptr_t recv,
             uintptr_t recvCounts, uintptr_t recvDispls, DataType dtype, uintptr_t stream) {
            h.run([&](Comm& comm) {
              comm.allToAllv(asPointer(send), static_cast<const size_t*>(asPointer(sendCounts)),
                             static_cast<const size_t*>(asPointer(sendDispls)), asPointer(recv),
                             static_cast<const size_t*>(asPointer(recvCounts)),
                             static_cast<const size_t*>(asPointer(recvDispls)), dtype, asStream(stream),
                             CountsLocation::Device);
            });
          },
          nb::arg("send"), nb::arg("send_counts"), nb::arg("send_displs"), nb::arg("recv"),
          nb::arg("recv_counts"), nb::arg("recv_displs"), nb::arg("dtype"), nb::arg("stream") = 0,
          "Counts and displacements: device pointers to size uint64 each (no host sync; graph safe)");
}

void bindPointToPoint(nb::class_<CommHandle>& c) {
  c.def(
       "send",
       [](CommHandle& h, uintptr_t buffer, size_t count, DataType dtype, int peer, uintptr_t stream) {
         h.run([&](Comm& comm) { comm.send(asPointer(buffer), count, dtype, peer, asStream(stream)); });
       },
       nb::arg("buffer"), nb::arg("count"), nb::arg("dtype"), nb::arg("peer"), nb::arg("stream") = 0)
      .def(
          "recv",
          [](CommHandle& h, uintptr_t buffer, size_t count, DataType dtype, int peer, uintptr_t stream) {
            h.run([&](Comm& comm) { comm.recv(asPointer(buffer), count, dtype, peer, asStream(stream)); });
          },
          nb::arg("buffer"), nb::arg("count"), nb::arg("dtype"), nb::arg("peer"), nb::arg("stream") = 0)
      .def("group_start", [](CommHandle& h) { h.run([](Comm& comm) { comm.groupStart(); }); })
      .def(
          "group_end", [](CommHandle& h) { h.run([](Comm& comm) { comm.groupEnd(); }); },
          "Launches the sends and receives since the matching group_start as one kernel")
      .def(
          "barrier",
          [](CommHandle& h, uintptr_t stream) { h.run([&](Comm& comm) { comm.barrier(asStream(stream)); }); },
          nb::arg("stream") = 0, "A device-side barrier of all ranks on `stream`");
}

}  // namespace

void bindComm(nb::module_& m) {
  nb::class_<CommHandle> c(m, "Comm", "Collectives on raw device pointers (ints) and a cudaStream_t (int)");
  bindConstruction(c);
  bindQueries(c);
  bindReductions(c);
  bindMovement(c);
  bindPointToPoint(c);
}

}  // namespace meshcomm::python
