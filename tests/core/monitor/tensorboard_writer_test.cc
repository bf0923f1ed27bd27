#include "core/monitor/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/faulty_file_system.h"
#include "core/monitor/crc32c.h"
#include "core/monitor/tfrecord.h"
#include "proto/tensorboard_event.pb.h"
#include "tests/support/temp_files.h"

namespace dslaunch::core {
namespace {

using testing::read_bytes;
using testing::TempDir;

constexpr double kStart = 1700000000.25;

uint64_t little_endian(const std::string& bytes, size_t offset, int size) {
  uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i)
    value = (value << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return value;
}

// The events of a whole event file, each record's framing and CRCs checked.
std::vector<tensorboard::Event> read_events(const std::string& path) {
  const std::string file = read_bytes(path);
  std::vector<tensorboard::Event> events;
  size_t offset = 0;
  while (offset < file.size()) {
    REQUIRE(file.size() - offset >= 16);
    const uint64_t length = little_endian(file, offset, 8);
    CHECK(little_endian(file, offset + 8, 4) == mask_crc32c(crc32c(file.substr(offset, 8))));
    REQUIRE(file.size() - offset - 16 >= length);
    const std::string data = file.substr(offset + 12, length);
    CHECK(little_endian(file, offset + 12 + length, 4) == mask_crc32c(crc32c(data)));
    REQUIRE(events.emplace_back().ParseFromString(data));
    offset += 16 + length;
  }
  return events;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  return name;
}

TEST_CASE("the file has TensorBoard's name and starts with the file_version event") {
  const TempDir dir;
  auto writer = TensorBoardWriter::create(dir.path(), kStart);
  REQUIRE(writer.ok());
  const std::string name = "events.out.tfevents.1700000000." + host_name();
  CHECK(writer->path() == dir.file(name));
  CHECK(dir.names() == std::vector<std::string>{name});

  // Visible before any flush: TensorBoard shows the run at once.
  const std::vector<tensorboard::Event> events = read_events(writer->path());
  REQUIRE(events.size() == 1);
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].wall_time() == kStart);
  CHECK(events[0].step() == 0);
  CHECK(read_bytes(writer->path()).substr(0, 12) ==
        std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
}

TEST_CASE("scalars are read back exactly once flushed") {
  const TempDir dir;
  auto writer = TensorBoardWriter::create(dir.path(), kStart);
  REQUIRE(writer.ok());
  REQUIRE(writer->add_scalar("Train/loss", 1, 2.5f, kStart + 1).ok());
  // Zero is written although proto3 leaves zeros out: simple_value is in a
  // oneof, and TensorBoard drops a value without it.
  REQUIRE(writer->add_scalar("Train/lr", 0, 0.0f, kStart + 2).ok());
  REQUIRE(writer->add_scalar("Train/loss", -7, std::numeric_limits<float>::quiet_NaN(), kStart + 3)
              .ok());
  CHECK(read_events(writer->path()).size() == 1);  // still buffered

  REQUIRE(writer->flush().ok());
  const std::vector<tensorboard::Event> events = read_events(writer->path());
  REQUIRE(events.size() == 4);
  CHECK(events[1].step() == 1);
  CHECK(events[1].wall_time() == kStart + 1);
  REQUIRE(events[1].summary().value_size() == 1);
  CHECK(events[1].summary().value(0).tag() == "Train/loss");
  CHECK(events[1].summary().value(0).simple_value() == 2.5f);
  CHECK(events[2].summary().value(0).tag() == "Train/lr");
  CHECK(events[2].summary().value(0).has_simple_value());
  CHECK(events[2].summary().value(0).simple_value() == 0.0f);
  CHECK(events[3].step() == -7);
  CHECK(std::isnan(events[3].summary().value(0).simple_value()));
  REQUIRE(writer->close().ok());
}

TEST_CASE("the writer flushes when destroyed") {
  const TempDir dir;
  std::string path;
  {
    auto writer = TensorBoardWriter::create(dir.path(), kStart);
    REQUIRE(writer.ok());
    path = writer->path();
    REQUIRE(writer->add_scalar("loss", 3, 1.0f, kStart).ok());
  }
  CHECK(read_events(path).size() == 2);
}

TEST_CASE("a writer that is never flushed still writes once its buffer is full") {
  const TempDir dir;
  FaultyFileSystem fs;
  auto writer = TensorBoardWriter::create(dir.path(), kStart, fs);
  REQUIRE(writer.ok());
  const int writes_after_create = fs.calls(FileCall::kWrite);
  Status status;
  for (int step = 0; step < 10000 && status.ok(); ++step) {
    status = writer->add_scalar("a/rather/long/tag/for/the/loss", step, 1.0f, kStart);
  }
  REQUIRE(status.ok());
  CHECK(fs.calls(FileCall::kWrite) > writes_after_create);
}

TEST_CASE("a second writer started in the same second gets a name of its own") {
  const TempDir dir;
  auto first = TensorBoardWriter::create(dir.path(), kStart);
  auto second = TensorBoardWriter::create(dir.path(), kStart + 0.5);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(second->path() == first->path() + "." + std::to_string(::getpid()) + ".1");
  REQUIRE(second->add_scalar("loss", 1, 1.0f, kStart + 1).ok());
  REQUIRE(second->close().ok());
  CHECK(read_events(first->path()).size() == 1);
  CHECK(read_events(second->path()).size() == 2);
}

TEST_CASE("missing folders are created") {
  const TempDir dir;
  auto writer = TensorBoardWriter::create(dir.file("runs/job"), kStart);
  REQUIRE(writer.ok());
  CHECK(read_events(writer->path()).size() == 1);
}

TEST_CASE("an empty folder path is refused") {
  auto writer = TensorBoardWriter::create("", kStart);
  REQUIRE_FALSE(writer.ok());
  CHECK(writer.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a folder that cannot be made is an error naming it") {
  const TempDir dir;
  testing::write_bytes(dir.file("plain_file"), "not a folder");
  auto writer = TensorBoardWriter::create(dir.file("plain_file/runs"), kStart);
  REQUIRE_FALSE(writer.ok());
  CHECK_THAT(writer.status().message(), Catch::Contains(dir.file("plain_file")));
}

TEST_CASE("a folder the process may not write to is an error naming the file") {
  const TempDir dir;
  FaultyFileSystem fs;
  // Injected: the tests may run as root, which any folder's mode lets in.
  fs.fail(FileCall::kCreate, 1, EACCES);
  auto writer = TensorBoardWriter::create(dir.path(), kStart, fs);
  REQUIRE_FALSE(writer.ok());
  CHECK(writer.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(writer.status().message(),
             Catch::Contains(dir.file("events.out.tfevents.1700000000.")) &&
                 Catch::Contains("Permission denied"));
}

TEST_CASE("a full disk at creation leaves no file") {
  const TempDir dir;
  FaultyFileSystem fs;
  fs.fail(FileCall::kWrite, 1, ENOSPC);
  auto writer = TensorBoardWriter::create(dir.path(), kStart, fs);
  REQUIRE_FALSE(writer.ok());
  CHECK(writer.status().code() == StatusCode::kResourceExhausted);
  CHECK(dir.names().empty());
}

TEST_CASE("a full disk fails the flush, and every call after it") {
  const TempDir dir;
  FaultyFileSystem fs;
  fs.fail(FileCall::kWrite, 2, ENOSPC);
  auto writer = TensorBoardWriter::create(dir.path(), kStart, fs);
  REQUIRE(writer.ok());
  REQUIRE(writer->add_scalar("loss", 1, 1.0f, kStart).ok());
  const Status failure = writer->flush();
  REQUIRE_FALSE(failure.ok());
  CHECK(failure.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(failure.message(), Catch::Contains(writer->path()));

  const int writes = fs.calls(FileCall::kWrite);
  CHECK(writer->add_scalar("loss", 2, 1.0f, kStart).message() == failure.message());
  CHECK(writer->flush().message() == failure.message());
  CHECK(writer->close().message() == failure.message());
  CHECK(fs.calls(FileCall::kWrite) == writes);
  CHECK(read_events(writer->path()).size() == 1);
}

TEST_CASE("a late write error reported by close is returned") {
  const TempDir dir;
  FaultyFileSystem fs;
  fs.fail(FileCall::kClose, 1, EIO);
  auto writer = TensorBoardWriter::create(dir.path(), kStart, fs);
  REQUIRE(writer.ok());
  const Status status = writer->close();
  CHECK(status.code() == StatusCode::kIoError);
  CHECK_THAT(status.message(), Catch::Contains(writer->path()));
}

}  // namespace
}  // namespace dslaunch::core
