// libFuzzer target: the launcher's output as RankOutput splits it into one
// file per rank and stream, fed in fuzzed chunks on both pipes, with mpirun's
// tags ("[1,3]<stdout>:") or srun's ("3: "). Besides crashes, hangs and
// sanitizer reports, it traps when a promise is broken: every line fed
// (a last one without a newline included, once finish() runs) is written to
// exactly one file, whole and newline-terminated; every line left untagged
// reaches the launcher-line callback; a rank's stderr tail holds at most
// tail_lines lines and they are the last lines of its stderr file.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "launcher/runner/rank_output.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using dslaunch::fuzz::require;
using dslaunch::runner::OutputStream;
namespace fs = std::filesystem;

std::string file_of(int rank, OutputStream stream) {
  return dslaunch::fuzz::scratch_dir() + "/" + (rank < 0 ? "launcher" : std::to_string(rank)) +
         (stream == OutputStream::kStdout ? ".out" : ".err");
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Lines in `bytes` once a missing last newline is added.
int64_t lines_in(const std::string& bytes) {
  return std::count(bytes.begin(), bytes.end(), '\n') +
         (bytes.empty() || bytes.back() == '\n' ? 0 : 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const auto tags = input.ConsumeBool() ? dslaunch::runner::OutputTags::kMpirun
                                        : dslaunch::runner::OutputTags::kSrun;
  const size_t tail_lines = input.ConsumeIntegralInRange<size_t>(0, 4);
  dslaunch::fuzz::clear_scratch_dir();

  std::set<int> ranks;
  int64_t launcher_lines = 0;
  std::string fed[2];
  {
    dslaunch::runner::RankOutput output(
        tags,
        [&](int rank, OutputStream stream) {
          ranks.insert(rank);
          return file_of(rank, stream);
        },
        tail_lines,
        [&](std::string_view line) {
          require(line.find('\n') == std::string_view::npos);
          ++launcher_lines;
        });
    while (input.remaining_bytes() > 0) {
      const auto pipe = input.ConsumeBool() ? OutputStream::kStdout : OutputStream::kStderr;
      const std::string chunk = input.ConsumeRandomLengthString(256);
      output.feed(pipe, chunk);
      fed[static_cast<int>(pipe)] += chunk;
    }
    output.finish();

    for (const int rank : ranks) {
      if (rank < 0) continue;
      const std::vector<std::string> tail = output.stderr_tail(rank);
      require(tail.size() <= tail_lines);
      std::string last;
      for (const std::string& line : tail) last += line + "\n";
      const std::string written = contents(file_of(rank, OutputStream::kStderr));
      require(written.size() >= last.size() &&
              written.compare(written.size() - last.size(), last.size(), last) == 0);
    }
  }

  int64_t written_lines = 0;
  for (const auto& entry : fs::directory_iterator(dslaunch::fuzz::scratch_dir())) {
    const std::string written = contents(entry.path().string());
    require(written.empty() || written.back() == '\n');
    written_lines += std::count(written.begin(), written.end(), '\n');
  }
  require(written_lines == lines_in(fed[0]) + lines_in(fed[1]));
  const int64_t untagged = lines_in(contents(file_of(-1, OutputStream::kStdout))) +
                           lines_in(contents(file_of(-1, OutputStream::kStderr)));
  require(launcher_lines == untagged);
  return 0;
}
