#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/file_system.h"
#include "core/status.h"

// TensorBoard event files: what DeepSpeed's `tensorboard` monitor writes, so
// that `tensorboard --logdir <dir>` plots a job's scalars.
//
// The format, as TensorFlow's EventsWriter makes it:
//  - the file is <dir>/events.out.tfevents.<unix seconds>.<hostname>;
//    TensorBoard reads every file in a folder whose name holds "tfevents",
//    in name order;
//  - it is a sequence of TFRecords (core/monitor/tfrecord.h: length, masked
//    CRC-32C of the length, data, masked CRC-32C of the data), each holding
//    one serialized tensorboard.Event (proto/tensorboard_event.proto, field
//    numbers TensorFlow's);
//  - the first Event carries file_version "brain.Event:2" and the file's
//    creation time; each later one a Summary with one scalar
//    (tag, simple_value) at a step and a wall time.
// A reader stops at a record that is incomplete (one being written) and
// picks it up again when more bytes arrive, so a file may be read while it
// grows.
namespace dslaunch::core {

// Writes one event file. Not thread-safe: one thread (rank 0's training loop)
// makes every call. Records are buffered in memory until flush(), close() or
// the buffer's size bound; only then do readers see them.
//
// The first failure is sticky: the file may end in a torn record after it,
// so every later call returns that failure again and writes nothing (a
// reader still gets every record before the torn one).
class TensorBoardWriter {
 public:
  // Creates `dir` (not empty) and its missing parents, then in it the new file
  // events.out.tfevents.<seconds>.<hostname>, <seconds> being `wall_time`
  // (seconds since the Unix epoch) truncated. When that name is taken
  // (another writer on this host started in the same second) it appends
  // ".<pid>.<n>" with the first n that is free. Writes the file_version
  // record through to the file. Fails, naming the folder or the file, when
  // the folder cannot be made or the file created or written (then no file
  // is left). Every file call goes through `fs`, which must outlive the
  // writer.
  static StatusOr<TensorBoardWriter> create(const std::string& dir, double wall_time,
                                            FileSystem& fs = default_file_system());

  TensorBoardWriter(TensorBoardWriter&&) = default;
  // Assigning would drop the buffered records of the writer replaced.
  TensorBoardWriter& operator=(TensorBoardWriter&&) = delete;
  // Writes what is buffered and closes the file, ignoring errors: call
  // close() to learn of them.
  ~TensorBoardWriter();

  // Appends the scalar `value` of the series `tag` (UTF-8, "Train/loss") at
  // `step`, stamped `wall_time` (seconds since the Unix epoch), to the
  // buffer. NaN and infinities are recorded as they are. Writes the buffer
  // out when it passes its bound, and returns that write's failure.
  Status add_scalar(std::string_view tag, int64_t step, float value, double wall_time);

  // Writes every buffered record to the file, so that a reader sees it.
  // Does not fsync: a power cut may lose what was flushed (TensorBoard's
  // files are a monitor, not a checkpoint).
  Status flush();

  // flush(), then closes the file, reporting a late write error (NFS
  // reports them here). No call may follow, whatever it returns.
  Status close();

  // The event file's path.
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::unique_ptr<WritableFile> file);

  // Writes the buffer to the file, recording a failure as sticky.
  Status write_buffer();

  std::string path_;
  std::unique_ptr<WritableFile> file_;  // null once closed (or moved from)
  std::string buffer_;                  // framed records not yet written
  Status failure_;                      // the first failure, returned ever after
};

}  // namespace dslaunch::core
