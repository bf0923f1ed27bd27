#include "launcher/runner/rank_output.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <catch2/catch.hpp>

namespace dslaunch::runner {
namespace {

namespace fs = std::filesystem;

struct LogFolder {
  fs::path dir;
  LogFolder() {
    static int counter = 0;
    dir = fs::path(std::getenv("TEST_TMPDIR")) / fmt::format("logs{}", counter++);
    fs::create_directories(dir);
  }
  std::function<std::string(int, OutputStream)> paths() const {
    return [dir = dir](int rank, OutputStream stream) {
      const char* name = stream == OutputStream::kStdout ? "stdout" : "stderr";
      return rank < 0 ? (dir / fmt::format("launcher.{}", name)).string()
                      : (dir / fmt::format("rank{}.{}", rank, name)).string();
    };
  }
  std::string read(const std::string& name) const {
    std::ifstream file(dir / name);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
};

}  // namespace

TEST_CASE("mpirun's tagged lines go to each rank's stdout and stderr files") {
  LogFolder logs;
  RankOutput output(OutputTags::kMpirun, logs.paths());
  output.feed(OutputStream::kStdout, "[1,0]<stdout>:step 1\n[1,1]<stdout>:step 1\n");
  output.feed(OutputStream::kStderr, "[1,1]<stderr>:warning: x\n");
  output.feed(OutputStream::kStdout, "[1,0]<stdout>:step 2\n");
  output.finish();
  CHECK(logs.read("rank0.stdout") == "step 1\nstep 2\n");
  CHECK(logs.read("rank1.stdout") == "step 1\n");
  CHECK(logs.read("rank1.stderr") == "warning: x\n");
}

TEST_CASE("a line split across reads is written whole, once its newline arrives") {
  LogFolder logs;
  RankOutput output(OutputTags::kMpirun, logs.paths());
  output.feed(OutputStream::kStdout, "[1,3]<stdout>:hel");
  CHECK(logs.read("rank3.stdout").empty());
  output.feed(OutputStream::kStdout, "lo wor");
  output.feed(OutputStream::kStdout, "ld\n[1,3]<stdout>:unfinished");
  CHECK(logs.read("rank3.stdout") == "hello world\n");
  output.finish();
  CHECK(logs.read("rank3.stdout") == "hello world\nunfinished\n");
}

TEST_CASE("untagged lines are the launcher's own") {
  LogFolder logs;
  RankOutput output(OutputTags::kMpirun, logs.paths());
  output.feed(OutputStream::kStderr,
              "--------------------------\nmpirun noticed that process rank 1 ... exited on "
              "signal 9 (Killed).\n[bad tag]<stdout>:x\n");
  output.finish();
  CHECK(logs.read("launcher.stderr") ==
        "--------------------------\nmpirun noticed that process rank 1 ... exited on signal 9 "
        "(Killed).\n[bad tag]<stdout>:x\n");
}

TEST_CASE("srun's labels name the rank; the pipe names the stream") {
  LogFolder logs;
  RankOutput output(OutputTags::kSrun, logs.paths());
  output.feed(OutputStream::kStdout, " 0: ready\n12: ready\n");
  output.feed(OutputStream::kStderr, "12: oops: bad\nsrun: error: node lost\n");
  output.finish();
  CHECK(logs.read("rank0.stdout") == "ready\n");
  CHECK(logs.read("rank12.stdout") == "ready\n");
  CHECK(logs.read("rank12.stderr") == "oops: bad\n");
  CHECK(logs.read("launcher.stderr") == "srun: error: node lost\n");
}

TEST_CASE("the last stderr lines of each rank are kept for failure reports") {
  LogFolder logs;
  RankOutput output(OutputTags::kMpirun, logs.paths(), 3);
  for (int i = 1; i <= 5; ++i) {
    output.feed(OutputStream::kStderr, fmt::format("[1,2]<stderr>:line {}\n", i));
  }
  output.feed(OutputStream::kStdout, "[1,2]<stdout>:not stderr\n");
  CHECK(output.stderr_tail(2) == std::vector<std::string>{"line 3", "line 4", "line 5"});
  CHECK(output.stderr_tail(0).empty());
}

TEST_CASE("10 MB without a newline is held in at most one bounded piece and written whole") {
  LogFolder logs;
  RankOutput output(OutputTags::kMpirun, logs.paths(), 3);
  constexpr size_t kTotal = 10 * 1000 * 1000;
  const std::string chunk(4096, 'x');
  output.feed(OutputStream::kStderr, "[1,4]<stderr>:");
  size_t fed = 0;
  size_t most_held = 0;
  while (fed < kTotal) {
    const size_t n = std::min(chunk.size(), kTotal - fed);
    output.feed(OutputStream::kStderr, std::string_view(chunk).substr(0, n));
    fed += n;
    most_held = std::max(most_held, output.pending_bytes());
  }
  CHECK(most_held <= RankOutput::kMaxPendingLine);
  output.feed(OutputStream::kStderr, "\n[1,4]<stderr>:next\n");
  output.finish();
  CHECK(logs.read("rank4.stderr") == std::string(kTotal, 'x') + "\nnext\n");
  CHECK(logs.read("launcher.stderr").empty());
  // The tail keeps the long line's first piece, not all of it.
  const std::vector<std::string> tail = output.stderr_tail(4);
  REQUIRE(tail.size() == 2);
  CHECK(tail[0].size() <= RankOutput::kMaxPendingLine);
  CHECK(tail[1] == "next");
}

TEST_CASE("a line of exactly the bound, and an unterminated long last line, keep every byte") {
  LogFolder logs;
  RankOutput output(OutputTags::kSrun, logs.paths());
  const std::string exact = "0: " + std::string(RankOutput::kMaxPendingLine - 3, 'a');
  output.feed(OutputStream::kStdout, exact + "\n");
  output.feed(OutputStream::kStdout, "0: " + std::string(3 * RankOutput::kMaxPendingLine, 'b'));
  CHECK(output.pending_bytes() < RankOutput::kMaxPendingLine);
  output.finish();
  CHECK(output.pending_bytes() == 0);
  CHECK(logs.read("rank0.stdout") == std::string(RankOutput::kMaxPendingLine - 3, 'a') + "\n" +
                                         std::string(3 * RankOutput::kMaxPendingLine, 'b') + "\n");
}

}  // namespace dslaunch::runner
