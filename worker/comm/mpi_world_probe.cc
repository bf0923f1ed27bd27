#include "worker/comm/mpi_world_probe.h"

#include <mpi.h>

#include <unistd.h>

#include <array>
#include <cstring>

#include "worker/comm/mpi_status.h"

namespace dslaunch::worker::comm {
namespace {

constexpr int kHostChars = 256;

// Fixed-size record so identities travel in one MPI_Gather of bytes.
struct PackedIdentity {
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  int32_t local_world_size;
  int64_t pid;
  char host[kHostChars];
};

PackedIdentity pack(const RankIdentity& id) {
  PackedIdentity packed{};
  packed.rank = id.rank;
  packed.world_size = id.world_size;
  packed.local_rank = id.local_rank;
  packed.local_world_size = id.local_world_size;
  packed.pid = id.pid;
  std::strncpy(packed.host, id.host.c_str(), kHostChars - 1);
  return packed;
}

RankIdentity unpack(const PackedIdentity& packed) {
  return RankIdentity{packed.rank,
                      packed.world_size,
                      packed.local_rank,
                      packed.local_world_size,
                      std::string(packed.host),
                      packed.pid};
}

// The first line, without the trailing blanks Open MPI leaves on it.
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  line.erase(line.find_last_not_of(" \t\r") + 1);
  return line;
}

}  // namespace

WorldProbe probe_mpi_world() {
  MPI_Comm comm = MPI_COMM_WORLD;
  WorldProbe probe;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int library_length = 0;
  MPI_Get_library_version(library, &library_length);
  // Open MPI counts the terminating NUL in library_length.
  probe.mpi_library = first_line(std::string(library));

  RankIdentity& self = probe.self;
  int rc = MPI_Comm_rank(comm, &self.rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &self.world_size);
  if (rc != MPI_SUCCESS) {
    probe.error = from_mpi(rc, "MPI_Comm_rank/size").message();
    return probe;
  }
  std::array<char, kHostChars> host{};
  gethostname(host.data(), host.size() - 1);
  self.host = host.data();
  self.pid = getpid();

  MPI_Comm node_comm = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, self.rank, MPI_INFO_NULL, &node_comm);
  if (rc != MPI_SUCCESS) {
    probe.error = from_mpi(rc, "MPI_Comm_split_type").message();
    return probe;
  }
  MPI_Comm_rank(node_comm, &self.local_rank);
  MPI_Comm_size(node_comm, &self.local_world_size);
  MPI_Comm_free(&node_comm);

  const int64_t contribution = self.rank + 1;
  int64_t sum = 0;
  rc = MPI_Allreduce(&contribution, &sum, 1, MPI_INT64_T, MPI_SUM, comm);
  if (rc != MPI_SUCCESS) {
    probe.error = from_mpi(rc, "MPI_Allreduce").message();
    return probe;
  }
  const int64_t n = self.world_size;
  // Every rank must agree the sum is right; a MIN over the flags says so.
  const int local_ok = sum == n * (n + 1) / 2 ? 1 : 0;
  int all_ok = 0;
  rc = MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (rc != MPI_SUCCESS) {
    probe.error = from_mpi(rc, "MPI_Allreduce").message();
    return probe;
  }
  probe.allreduce_ok = all_ok == 1;

  const PackedIdentity mine = pack(self);
  std::vector<PackedIdentity> all(self.rank == 0 ? self.world_size : 0);
  rc = MPI_Gather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, 0, comm);
  if (rc != MPI_SUCCESS) {
    probe.error = from_mpi(rc, "MPI_Gather").message();
    return probe;
  }
  for (const PackedIdentity& packed : all) probe.ranks.push_back(unpack(packed));
  return probe;
}

}  // namespace dslaunch::worker::comm
