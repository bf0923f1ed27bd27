#include "core/monitor/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <utility>

#include <fmt/format.h>

#include "core/errno_status.h"
#include "core/host_name.h"
#include "core/monitor/tfrecord.h"
#include "proto/tensorboard_event.pb.h"

namespace dslaunch::core {
namespace {

// TensorBoard recognises an event file by this first record's value.
constexpr char kFileVersion[] = "brain.Event:2";

// A step's handful of scalars is a few hundred bytes: the buffer is written
// out by the caller's flush() long before this, which only bounds memory
// for a caller that never flushes.
constexpr size_t kBufferBound = 64 << 10;

// How many ".<pid>.<n>" names to try when the plain name is taken: more
// writers than this starting in one second in one folder is a bug.
constexpr int kMaxNameSuffixes = 100;

// TensorBoard does not read the host part: it only tells people whose file
// is whose, so an unreadable name needs no error.
std::string host_part() {
  const std::string name = host_name();
  return name.empty() ? "localhost" : name;
}

// Creates the event file under the first free name; `path` is the name
// tried last.
int create_event_file(FileSystem& fs, const std::string& dir, double wall_time, std::string& path,
                      std::unique_ptr<WritableFile>& file) {
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}", dir,
                                       static_cast<int64_t>(wall_time), host_part());
  int failure = 0;
  for (int suffix = 0; suffix <= kMaxNameSuffixes; ++suffix) {
    path = suffix == 0 ? base : fmt::format("{}.{}.{}", base, ::getpid(), suffix);
    failure = fs.create_file(path, 0644, file);
    if (failure != EEXIST) break;
  }
  return failure;
}

}  // namespace

StatusOr<TensorBoardWriter> TensorBoardWriter::create(const std::string& dir, double wall_time,
                                                      FileSystem& fs) {
  // An empty folder would put the file at the root of the file system.
  if (dir.empty()) return invalid_argument("TensorBoard log folder: the path is empty");
  if (std::string error; !create_folders(fs, dir, 0755, error)) {
    return Status(StatusCode::kIoError, "TensorBoard log folder: " + error);
  }
  std::string path;
  std::unique_ptr<WritableFile> file;
  if (const int failure = create_event_file(fs, dir, wall_time, path, file)) {
    return errno_status(failure, fmt::format("cannot create TensorBoard event file '{}'", path));
  }
  TensorBoardWriter writer(std::move(path), std::move(file));
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version(kFileVersion);
  append_tfrecord(writer.buffer_, event.SerializeAsString());
  // Written through at once: TensorBoard shows the run as soon as it exists,
  // and a folder that takes no bytes fails here rather than at the first step.
  if (Status status = writer.flush(); !status.ok()) {
    // A file without its file_version record would be a run TensorBoard
    // cannot read: leave none.
    (void)writer.close();
    (void)fs.remove(writer.path_);
    return status;
  }
  return writer;
}

TensorBoardWriter::TensorBoardWriter(std::string path, std::unique_ptr<WritableFile> file)
    : path_(std::move(path)), file_(std::move(file)) {}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) (void)close();
}

Status TensorBoardWriter::add_scalar(std::string_view tag, int64_t step, float value,
                                     double wall_time) {
  if (!failure_.ok()) return failure_;
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary::Value* scalar = event.mutable_summary()->add_value();
  scalar->set_tag(std::string(tag));
  scalar->set_simple_value(value);
  append_tfrecord(buffer_, event.SerializeAsString());
  return buffer_.size() >= kBufferBound ? write_buffer() : Status();
}

Status TensorBoardWriter::flush() {
  if (!failure_.ok()) return failure_;
  return write_buffer();
}

Status TensorBoardWriter::close() {
  Status status = flush();
  if (file_ == nullptr) return status;
  const int failure = std::exchange(file_, nullptr)->close();
  if (status.ok() && failure != 0) {
    failure_ =
        errno_status(failure, fmt::format("cannot close TensorBoard event file '{}'", path_));
    status = failure_;
  }
  return status;
}

Status TensorBoardWriter::write_buffer() {
  if (buffer_.empty()) return {};
  if (const int failure = file_->write_all(buffer_)) {
    failure_ =
        errno_status(failure, fmt::format("cannot write TensorBoard event file '{}'", path_));
    return failure_;
  }
  buffer_.clear();
  return {};
}

}  // namespace dslaunch::core
