#include "launcher/runner/rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <optional>

namespace dslaunch::runner {
namespace {

struct Tagged {
  int rank = -1;
  OutputStream stream = OutputStream::kStdout;
  std::string_view text;
};

std::optional<int> parse_rank(std::string_view digits) {
  int value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value < 0) return std::nullopt;
  return value;
}

// "[1,3]<stdout>:text" -> rank 3, stdout, "text".
std::optional<Tagged> parse_mpirun(std::string_view line) {
  if (!line.starts_with('[')) return std::nullopt;
  const auto comma = line.find(',');
  const auto close = line.find(']');
  if (comma == std::string_view::npos || close == std::string_view::npos || comma > close) {
    return std::nullopt;
  }
  const auto rank = parse_rank(line.substr(comma + 1, close - comma - 1));
  if (!rank) return std::nullopt;
  std::string_view rest = line.substr(close + 1);
  Tagged tagged{*rank, OutputStream::kStdout, {}};
  if (rest.starts_with("<stdout>:")) {
    tagged.text = rest.substr(9);
  } else if (rest.starts_with("<stderr>:")) {
    tagged.stream = OutputStream::kStderr;
    tagged.text = rest.substr(9);
  } else {
    return std::nullopt;
  }
  return tagged;
}

// "3: text" (srun pads the rank with spaces to a common width).
std::optional<Tagged> parse_srun(std::string_view line, OutputStream pipe) {
  const auto colon = line.find(": ");
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view digits = line.substr(0, colon);
  while (!digits.empty() && digits.front() == ' ') digits.remove_prefix(1);
  const auto rank = parse_rank(digits);
  if (!rank) return std::nullopt;
  return Tagged{*rank, pipe, line.substr(colon + 2)};
}

}  // namespace

RankOutput::RankOutput(OutputTags tags, std::function<std::string(int, OutputStream)> path_of,
                       size_t tail_lines, std::function<void(std::string_view)> on_launcher_line)
    : tags_(tags),
      path_of_(std::move(path_of)),
      tail_lines_(tail_lines),
      on_launcher_line_(std::move(on_launcher_line)) {}

void RankOutput::feed(OutputStream pipe, std::string_view bytes) {
  std::string& pending = pending_[static_cast<int>(pipe)];
  while (!bytes.empty()) {
    // Only the bytes that fit in the pending line are searched, so a long
    // run without newlines is scanned once, never again per chunk.
    const std::string_view fits = bytes.substr(0, kMaxPendingLine - pending.size());
    const size_t newline = fits.find('\n');
    if (newline != std::string_view::npos) {
      pending.append(fits.substr(0, newline));
      flush_pending(pipe, true);
      bytes.remove_prefix(newline + 1);
      continue;
    }
    pending.append(fits);
    bytes.remove_prefix(fits.size());
    if (pending.size() == kMaxPendingLine) flush_pending(pipe, false);
  }
  for (auto& [key, file] : files_) fflush(file.get());
}

void RankOutput::finish() {
  for (const OutputStream pipe : {OutputStream::kStdout, OutputStream::kStderr}) {
    const int index = static_cast<int>(pipe);
    if (!pending_[index].empty() || continuing_[index]) flush_pending(pipe, true);
  }
  for (auto& [key, file] : files_) fflush(file.get());
}

void RankOutput::flush_pending(OutputStream pipe, bool line_ended) {
  const int index = static_cast<int>(pipe);
  std::string& pending = pending_[index];
  std::optional<Destination>& continuing = continuing_[index];
  if (continuing) {
    write(continuing->rank, continuing->stream, pending, line_ended);
  } else {
    continuing = route(pipe, pending, line_ended);
  }
  if (line_ended) continuing.reset();
  pending.clear();
}

std::vector<std::string> RankOutput::stderr_tail(int rank) const {
  const auto it = tails_.find(rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

RankOutput::Destination RankOutput::route(OutputStream pipe, std::string_view line,
                                          bool line_ended) {
  const std::optional<Tagged> tagged =
      tags_ == OutputTags::kMpirun ? parse_mpirun(line) : parse_srun(line, pipe);
  if (!tagged) {
    write(-1, pipe, line, line_ended);
    if (on_launcher_line_) on_launcher_line_(line);
    return {-1, pipe};
  }
  write(tagged->rank, tagged->stream, tagged->text, line_ended);
  if (tagged->stream == OutputStream::kStderr) {
    std::deque<std::string>& tail = tails_[tagged->rank];
    tail.emplace_back(tagged->text);
    if (tail.size() > tail_lines_) tail.pop_front();
  }
  return {tagged->rank, tagged->stream};
}

void RankOutput::write(int rank, OutputStream stream, std::string_view text, bool line_ended) {
  const auto key = std::make_pair(rank, static_cast<int>(stream));
  auto it = files_.find(key);
  if (it == files_.end()) {
    const std::string path = path_of_(rank, stream);
    // Logs are private to the user (0600), whatever the umask says.
    const int fd =
        path.empty() ? -1 : ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    FILE* file = fd < 0 ? nullptr : fdopen(fd, "a");
    if (fd >= 0 && file == nullptr) ::close(fd);
    it = files_.emplace(key, std::unique_ptr<FILE, int (*)(FILE*)>(file, fclose)).first;
  }
  // A file that could not be opened loses its lines rather than the job.
  if (FILE* file = it->second.get()) {
    fwrite(text.data(), 1, text.size(), file);
    if (line_ended) fputc('\n', file);
  }
}

}  // namespace dslaunch::runner
