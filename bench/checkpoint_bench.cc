// Checkpoint shard I/O: write_shard's bandwidth (including fsync) beside dd
// writing the same bytes with conv=fsync, read_flat_range's beside dd reading
// them back, both on the same folder in the same run, and the time a caller
// spends in AsyncShardWriter::save() as a share of a synchronous write.
//
//   bazel run //bench:checkpoint_bench -- --bytes 1073741824 --dir /tmp
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "worker/checkpoint/async_shard_writer.h"
#include "core/checkpoint/shard_file.h"
#include "core/file_system.h"
#include "core/uring_file.h"

namespace {

namespace checkpoint = dslaunch::worker::checkpoint;
namespace core = dslaunch::core;

double seconds(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// "min-max" of the runs, to show how noisy a shared disk is.
std::string spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return fmt::format("{:.2f}-{:.2f}", values.front(), values.back());
}

double gb_per_second(int64_t bytes, double seconds) { return bytes / seconds / 1e9; }

void run_or_die(const std::string& command) {
  if (std::system(command.c_str()) != 0) {
    std::cerr << "checkpoint_bench: '" << command << "' failed\n";
    std::exit(1);
  }
}

// Drops the file's pages from the page cache (it is synced, so they are
// clean), so the next read comes from the disk without root's drop_caches.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fdatasync(fd) != 0 || ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
    std::cerr << "checkpoint_bench: cannot evict '" << path << "' from the page cache\n";
    std::exit(1);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checkpoint shard write/read bandwidth beside dd, and the async save stall"};
  int64_t bytes = int64_t{1} << 30;
  const char* tmpdir = std::getenv("TMPDIR");
  std::string dir = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  app.add_option("--bytes", bytes, "Shard data: params, m and v together (default 1 GiB)");
  int runs = 3;
  app.add_option("--dir", dir, "Folder to write in (default $TMPDIR or /tmp)");
  app.add_option("--runs", runs, "Runs of each measurement (median reported)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const int64_t count = bytes / 12;
  // One flat tensor of `count` elements: the layout costs nothing to read.
  const std::vector<core::LayoutTensor> layout = {
      core::LayoutTensor{.name = "flat",
                         .global_shape = {count},
                         .split = {.view = {count}, .dim = 0, .index = 0, .parts = 1},
                         .offset = 0,
                         .numel = count}};
  core::ShardHeader header;
  header.step = 1000;
  header.total_parameters = count;
  header.end = count;
  header.optimizer_step = 1000;
  header.layout = layout;
  std::vector<float> params(count);
  std::vector<float> adam_m(count);
  std::vector<float> adam_v(count);
  for (int64_t i = 0; i < count; ++i) {
    params[i] = static_cast<float>(i) * 1e-6f;
    adam_m[i] = static_cast<float>(i) * 1e-9f;
    adam_v[i] = static_cast<float>(i) * 1e-12f;
  }
  const std::vector<core::ShardArrayData> arrays = {
      {{core::StateKind::kParameter, core::DType::kF32}, params.data()},
      {{core::StateKind::kAdamM, core::DType::kF32}, adam_m.data()},
      {{core::StateKind::kAdamV, core::DType::kF32}, adam_v.data()}};
  const std::string shard_path = dir + "/checkpoint-bench-shard.bin";
  const std::string dd_path = dir + "/dd.bin";

  std::cout << fmt::format(
      "{} floats per array ({:.2f} GB of shard data) in {}; median of {} runs, alternating with "
      "dd\n\n",
      count, count * 12 / 1e9, dir, runs);
  {
    // How this folder takes large files (what write_shard uses).
    std::unique_ptr<core::WritableFile> probe;
    const std::string probe_path = dir + "/checkpoint-bench-probe.bin";
    (void)core::default_file_system().remove(probe_path);
    if (core::default_file_system().create_large_file(probe_path, 0600, probe) == 0) {
      const core::LargeFileMode mode = core::large_file_mode(*probe);
      const core::LargeFileOptions options;
      std::cout << fmt::format("shard writes: {}, {}, {} MiB blocks, {} in flight\n\n",
                               mode.io_uring ? "io_uring" : "pwrite (no io_uring here)",
                               mode.direct ? "O_DIRECT" : "buffered (no O_DIRECT here)",
                               options.block_bytes >> 20, options.queue_depth);
      (void)probe->close();
    }
    (void)core::default_file_system().remove(probe_path);
  }
  std::cout << fmt::format("{:<44} {:>10} {:>10} {:>12}\n", "", "GB/s", "seconds", "range");

  std::vector<double> write_times;
  std::vector<double> dd_write_times;
  core::WrittenShard written;
  for (int run = 0; run < runs; ++run) {
    write_times.push_back(
        seconds([&] { written = core::write_shard(shard_path, header, arrays); }));
    if (!written.ok()) {
      std::cerr << "checkpoint_bench: " << written.error << "\n";
      return 1;
    }
    // The same bytes, from the shard just written (put in the page cache
    // first, untimed, as the arrays are in memory; write_shard's O_DIRECT
    // writes leave it out): zeros could be written faster than data by a
    // disk that compresses or skips them, as virtual disks may.
    run_or_die(fmt::format("cat {} > /dev/null", shard_path));
    dd_write_times.push_back(seconds([&] {
      run_or_die(fmt::format("dd if={} of={} bs=8M conv=fsync status=none", shard_path, dd_path));
    }));
  }
  const double write_seconds = median(write_times);
  const double dd_write_seconds = median(dd_write_times);
  std::cout << fmt::format(
      "{:<44} {:>10.2f} {:>10.2f} {:>12}\n", "write_shard (xxh64, fsync, rename)",
      gb_per_second(written.size_bytes, write_seconds), write_seconds, spread(write_times));
  std::cout << fmt::format("{:<44} {:>10.2f} {:>10.2f} {:>12}\n",
                           "dd bs=8M conv=fsync (copying the shard)",
                           gb_per_second(written.size_bytes, dd_write_seconds), dd_write_seconds,
                           spread(dd_write_times));

  std::vector<double> read_times;
  std::vector<double> dd_read_times;
  std::vector<float> out(count);
  std::string error;
  for (int run = 0; run < runs; ++run) {
    evict(shard_path);
    evict(dd_path);
    read_times.push_back(seconds([&] {
      for (const auto kind :
           {core::StateKind::kParameter, core::StateKind::kAdamM, core::StateKind::kAdamV}) {
        if (!core::read_flat_range({{shard_path, 0, count}}, layout, kind, 0, count, out.data(),
                                   error)) {
          std::cerr << "checkpoint_bench: " << error << "\n";
          std::exit(1);
        }
      }
    }));
    dd_read_times.push_back(seconds(
        [&] { run_or_die(fmt::format("dd if={} of=/dev/null bs=8M status=none", dd_path)); }));
  }
  const double read_seconds = median(read_times);
  const double dd_read_seconds = median(dd_read_times);
  std::cout << fmt::format("{:<44} {:>10.2f} {:>10.2f} {:>12}\n", "read_flat_range (3 arrays)",
                           gb_per_second(count * 12, read_seconds), read_seconds,
                           spread(read_times));
  std::cout << fmt::format("{:<44} {:>10.2f} {:>10.2f} {:>12}\n", "dd bs=8M of=/dev/null",
                           gb_per_second(written.size_bytes, dd_read_seconds), dd_read_seconds,
                           spread(dd_read_times));
  std::cout << "(both files evicted with posix_fadvise(POSIX_FADV_DONTNEED) before each read)\n\n";
  std::filesystem::remove(dd_path);

  // The first save allocates the writer's buffers; later ones reuse them.
  checkpoint::AsyncShardWriter writer;
  const auto check = [](const core::WrittenShard& result) {
    if (!result.ok()) std::cerr << "checkpoint_bench: " << result.error << "\n";
  };
  const double first_save = seconds([&] { writer.save(shard_path, header, arrays, check); });
  writer.wait();
  std::vector<double> save_times;
  std::vector<double> background_times;
  for (int run = 0; run < runs; ++run) {
    save_times.push_back(seconds([&] { writer.save(shard_path, header, arrays, check); }));
    background_times.push_back(save_times.back() + seconds([&] { writer.wait(); }));
  }
  const double save = median(save_times);
  const double background = median(background_times);
  // Borrowed, as the trainer saves state in memory: save() copies nothing;
  // the next optimizer step's release() waits for whatever of the write the
  // step's forward and backward passes did not cover (all of it here).
  using Hold = checkpoint::AsyncShardWriter::Hold;
  std::vector<double> borrow_times;
  std::vector<double> release_times;
  for (int run = 0; run < runs; ++run) {
    borrow_times.push_back(
        seconds([&] { writer.save(shard_path, header, arrays, {}, check, Hold::kBorrow); }));
    release_times.push_back(seconds([&] { writer.release(); }));
  }
  const double borrow = median(borrow_times);
  const double release = median(release_times);
  std::cout << fmt::format("{:<44} {:>10} {:>10}\n", "", "seconds", "of sync");
  std::cout << fmt::format("{:<44} {:>10.2f} {:>9.0f}%\n", "synchronous write_shard", write_seconds,
                           100.0);
  std::cout << fmt::format("{:<44} {:>10.3f} {:>9.1f}%\n", "AsyncShardWriter::save(), first",
                           first_save, 100 * first_save / write_seconds);
  std::cout << fmt::format("{:<44} {:>10.3f} {:>9.1f}%\n",
                           "AsyncShardWriter::save(), buffers reused", save,
                           100 * save / write_seconds);
  std::cout << fmt::format("{:<44} {:>10.2f} {:>9.0f}%\n", "  its background write (save to wait)",
                           background, 100 * background / write_seconds);
  std::cout << fmt::format("{:<44} {:>10.4f} {:>9.1f}%\n", "AsyncShardWriter::save(), borrowed",
                           borrow, 100 * borrow / write_seconds);
  std::cout << fmt::format("{:<44} {:>10.2f} {:>9.0f}%\n",
                           "  release() at once (no step to overlap)", release,
                           100 * release / write_seconds);
  std::filesystem::remove(shard_path);
  std::cout << "\nTarget: the stall in save() with reused buffers under 10% of a synchronous "
               "write; writes and reads are compared with dd on the same disk. A borrowed save "
               "stalls training only by what of its write outlasts the next step's forward and "
               "backward passes (release(), before the optimizer step).\n";
  return 0;
}
