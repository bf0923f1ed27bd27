#include "core/swap_file.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

namespace fs = std::filesystem;

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

std::unique_ptr<char, AlignedFree> aligned(int64_t bytes) {
  void* memory = nullptr;
  REQUIRE(posix_memalign(&memory, SwapFile::kSwapAlignment, static_cast<size_t>(bytes)) == 0);
  return std::unique_ptr<char, AlignedFree>(static_cast<char*>(memory));
}

std::string folder_for(const char* name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp != nullptr ? tmp : "/tmp") / "swap_file_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

TEST_CASE(
    "a swap file gives back what was written at each offset, whatever order the waits "
    "come in, and leaves nothing in its folder") {
  // Requests of one block and of several per transfer, submitted together
  // or one by one, with the queue holding fewer than a transfer's requests.
  struct Io {
    int64_t block_size;
    bool single_submit;
  };
  for (const Io io : {Io{3 * SwapFile::kSwapAlignment, false}, Io{SwapFile::kSwapAlignment, false},
                      Io{2 * SwapFile::kSwapAlignment, true}}) {
  for (const char* root : {"disk", "shm"}) {
    const std::string folder = std::string(root) == "shm"
                                   ? (fs::create_directories("/dev/shm/swap_file_test"),
                                      std::string("/dev/shm/swap_file_test"))
                                   : folder_for(root);
    INFO(folder << ", requests of " << io.block_size << " bytes"
                << (io.single_submit ? ", submitted one by one" : ""));
    StatusOr<std::unique_ptr<SwapFile>> created =
        SwapFile::create(folder, {.block_size = io.block_size, .queue_depth = 2,
                                  .single_submit = io.single_submit});
    REQUIRE(created.ok());
    SwapFile& file = **created;
    INFO("O_DIRECT " << file.direct() << ", io_uring " << file.uses_io_uring());
    CHECK(fs::is_empty(folder));  // unlinked at once
    constexpr int kBlocks = 9;
    constexpr int64_t kBlock = 3 * SwapFile::kSwapAlignment;
    std::vector<std::unique_ptr<char, AlignedFree>> written;
    std::vector<SwapFile::Ticket> tickets;
    std::mt19937 engine(7);
    // Blocks written in a shuffled order of offsets, more than the queue holds.
    std::vector<int> order(kBlocks);
    for (int i = 0; i < kBlocks; ++i) order[i] = (i * 4) % kBlocks;
    for (int i = 0; i < kBlocks; ++i) {
      written.push_back(aligned(kBlock));
      for (int64_t b = 0; b < kBlock; ++b) written.back().get()[b] = static_cast<char>(engine());
    }
    for (const int block : order) {
      tickets.push_back(file.start_write(written[block].get(), kBlock, block * kBlock));
    }
    // Waited for last first: every earlier one is done too, or completes.
    REQUIRE(file.wait(tickets.back()).ok());
    REQUIRE(file.wait_all().ok());
    std::vector<std::unique_ptr<char, AlignedFree>> read;
    std::vector<SwapFile::Ticket> reads;
    for (int block = 0; block < kBlocks; ++block) {
      read.push_back(aligned(kBlock));
      reads.push_back(file.start_read(read.back().get(), kBlock, block * kBlock));
    }
    for (int block = kBlocks - 1; block >= 0; --block) {
      REQUIRE(file.wait(reads[block]).ok());
      CHECK(std::memcmp(read[block].get(), written[block].get(), kBlock) == 0);
    }
  }
  }
}

TEST_CASE("swap file I/O settings that cannot work are refused, naming them") {
  const std::string folder = folder_for("settings");
  StatusOr<std::unique_ptr<SwapFile>> unaligned = SwapFile::create(folder, {.block_size = 5000});
  CHECK_FALSE(unaligned.ok());
  CHECK_THAT(unaligned.status().message(), Catch::Contains("block size 5000"));
  StatusOr<std::unique_ptr<SwapFile>> no_queue = SwapFile::create(folder, {.queue_depth = 0});
  CHECK_FALSE(no_queue.ok());
  CHECK_THAT(no_queue.status().message(), Catch::Contains("queue depth 0"));
}

TEST_CASE("a swap file in a folder that is not there is refused, naming the folder") {
  StatusOr<std::unique_ptr<SwapFile>> created = SwapFile::create("/nonexistent/nvme", {});
  REQUIRE_FALSE(created.ok());
  CHECK(created.status().message() ==
        "cannot create a swap file in '/nonexistent/nvme': No such file or directory");
}

}  // namespace
}  // namespace dslaunch::core
