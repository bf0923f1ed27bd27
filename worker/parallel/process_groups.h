#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "topology/process_grid.h"

namespace dslaunch::worker {

// A communicator of one rank: the whole world, or its group along one grid axis.
enum class Axis { world, pipe, data, model };

// "world", "pipe", "data", "model": the names the job spec and reports use.
std::string_view axis_name(Axis axis);
std::optional<Axis> parse_axis(std::string_view name);  // std::nullopt if unknown

// The communicators of one rank on the 3D process grid (axes pipe, data,
// model; model fastest). Each axis communicator holds exactly the ranks of
// the topology::ProcessGrid group containing this rank, ordered by world rank,
// so a rank's position in its `data()` communicator is its data coordinate.
//
// Owns its communicators (a duplicate of the world and one per axis), all
// with MPI_ERRORS_RETURN, and frees them on destruction. Destruction frees
// communicators, which MPI makes collective: destroy on every rank, and
// before MPI_Finalize (after it, the destructor leaves them alone). Not
// thread-safe: use one ProcessGroups from one thread at a time.
class ProcessGroups {
 public:
  struct Created {
    std::unique_ptr<ProcessGroups> groups;  // null when `error` is set
    std::string error;
  };

  // Collective over `world`: every rank must call it with the same shape.
  // Fails, on every rank and before any communication, if the world's size
  // is not pipe·data·model or an axis is smaller than 1; on an MPI error the
  // communicators made so far are freed. `world` itself is left unchanged.
  static Created create(MPI_Comm world, topology::GridShape shape);

  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  // A duplicate of the `world` given to create, so traffic here never meets
  // the caller's own messages on it.
  MPI_Comm world() const { return world_; }
  MPI_Comm pipe() const { return pipe_; }
  MPI_Comm data() const { return data_; }
  MPI_Comm model() const { return model_; }
  MPI_Comm communicator(Axis axis) const;

  // Ranks in the communicator of `axis`: the axis size, or the world size.
  int size(Axis axis) const;

  int rank() const { return rank_; }  // rank in world()
  topology::GridCoord coord() const { return grid_.coord_of(rank_); }
  const topology::ProcessGrid& grid() const { return grid_; }

 private:
  ProcessGroups(topology::GridShape shape, int rank);

  topology::ProcessGrid grid_;
  int rank_;
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm pipe_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm model_ = MPI_COMM_NULL;
};

}  // namespace dslaunch::worker
