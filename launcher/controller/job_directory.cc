#include "launcher/controller/job_directory.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "core/errno_status.h"
#include "core/json_input.h"
#include "launcher/controller/posix_file.h"
#include "core/atomic_file.h"

namespace dslaunch::controller {
namespace {

constexpr const char* kStateFile = "state.json";
constexpr const char* kTokenFile = "token";
// A job's record is its owner's alone: nothing in it is for group or other.
constexpr mode_t kPrivateFolder = 0700;
constexpr mode_t kPrivateFile = 0600;

// The whole of `data`, or false with errno set.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

// Appends `line` with one write to a file opened for this call alone, so the
// line is in the file (if not yet on the disk) when this returns.
bool append_line(const std::string& path, std::string_view line, std::string& error) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.ok() || !write_all(fd.get(), line) || fd.close() != 0) {
    error = fmt::format("cannot append to '{}': {}", path, core::errno_text(errno));
    return false;
  }
  return true;
}

std::optional<std::string> read_whole_file(const std::string& path, std::string& error) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) {
    error = fmt::format("cannot read '{}': {}", path, core::errno_text(errno));
    return std::nullopt;
  }
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      error = fmt::format("cannot read '{}': {}", path, core::errno_text(errno));
      return std::nullopt;
    }
    content.append(buffer, static_cast<size_t>(got));
  }
  return content;
}

// Text from the ranks (stderr tails, error reports) need not be UTF-8;
// replacing bad bytes keeps dump() from throwing.
template <typename Json>
std::string dump(const Json& json, int indent) {
  return json.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string default_jobs_root() {
  if (const char* home = std::getenv("DSLAUNCH_HOME"); home && *home) {
    return strip_trailing_slashes(home) + "/jobs";
  }
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    const passwd* entry = ::getpwuid(::getuid());
    home = entry && entry->pw_dir ? entry->pw_dir : ".";
  }
  return strip_trailing_slashes(home) + "/.dslaunch/jobs";
}

std::string new_job_id(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  std::random_device random;
  const unsigned suffix = random() & 0xffffu;
  return fmt::format("{}-{}-{:04x}", name, stamp, suffix);
}

std::optional<JobDirectory> JobDirectory::create(const std::string& root, const std::string& job_id,
                                                 std::string& error, core::FileSystem& fs) {
  if (job_id.empty() || job_id == "." || job_id == ".." || job_id.find('/') != std::string::npos) {
    error = fmt::format("invalid job id '{}': it must be a single folder name", job_id);
    return std::nullopt;
  }
  const std::string base = strip_trailing_slashes(root.empty() ? "." : root);
  if (!core::create_folders(fs, base, kPrivateFolder, error)) return std::nullopt;
  const std::string path = join_path(base, job_id);
  // The folder holds the job's token: only its owner may look inside.
  if (const int failure = fs.make_folder(path, kPrivateFolder);
      failure != 0 && failure != EEXIST) {
    error = fmt::format("cannot create job folder '{}': {}", path, core::errno_text(failure));
    return std::nullopt;
  }
  return open(path, error, fs);
}

std::optional<JobDirectory> JobDirectory::open(const std::string& dir, std::string& error,
                                               core::FileSystem& fs) {
  const std::string path = strip_trailing_slashes(dir);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    error = fmt::format("cannot open job folder '{}': {}", path, core::errno_text(errno));
    return std::nullopt;
  }
  if (!S_ISDIR(info.st_mode)) {
    error = fmt::format("cannot open job folder '{}': {}", path, core::errno_text(ENOTDIR));
    return std::nullopt;
  }
  return JobDirectory(path, fs);
}

std::string JobDirectory::job_id() const {
  const auto slash = path_.rfind('/');
  return slash == std::string::npos ? path_ : path_.substr(slash + 1);
}

bool JobDirectory::write_spec(std::string_view yaml, std::string& error) {
  return core::replace_file_durably(path_, "spec.yaml", yaml, kPrivateFile, error, *fs_);
}

bool JobDirectory::write_state(const nlohmann::json& state, std::string& error) {
  return core::replace_file_durably(path_, kStateFile, dump(state, 2) + "\n", kPrivateFile,
                                            error, *fs_);
}

std::optional<nlohmann::json> JobDirectory::read_state(std::string& error) const {
  const std::string path = join_path(path_, kStateFile);
  const auto text = read_whole_file(path, error);
  if (!text) return std::nullopt;
  std::string parse_error;
  std::optional<nlohmann::json> state = core::parse_untrusted_json(*text, parse_error);
  if (!state) error = fmt::format("cannot parse '{}': {}", path, parse_error);
  return state;
}

bool JobDirectory::append_event(int rank, std::string_view kind, std::string_view detail,
                                std::string& error) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  nlohmann::ordered_json event;
  event["time"] = static_cast<double>(ms) / 1000.0;
  event["rank"] = rank < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(rank);
  event["kind"] = kind;
  event["detail"] = detail;
  return append_line(join_path(path_, "events.jsonl"), dump(event, -1) + "\n", error);
}

bool JobDirectory::append_metrics(const nlohmann::json& step_metrics, std::string& error) {
  return append_line(join_path(path_, "metrics.jsonl"), dump(step_metrics, -1) + "\n", error);
}

bool JobDirectory::write_token(std::string_view token, std::string& error) {
  return core::replace_file_durably(path_, kTokenFile, token, kPrivateFile, error, *fs_);
}

std::optional<std::string> JobDirectory::read_token(std::string& error) const {
  const std::string path = join_path(path_, kTokenFile);
  auto token = read_whole_file(path, error);
  if (!token) return std::nullopt;
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  if (token->empty()) {
    error = fmt::format("token file '{}' is empty", path);
    return std::nullopt;
  }
  return token;
}

std::string JobDirectory::rank_log_path(int attempt, int rank, std::string_view stream,
                                        std::string& error) const {
  if (attempt < 0 || rank < 0 || (stream != "stdout" && stream != "stderr")) {
    error = fmt::format("no log for attempt {}, rank {}, stream '{}' (stdout or stderr)", attempt,
                        rank, stream);
    return {};
  }
  return private_log(fmt::format("{}/logs/attempt_{}/rank_{}", path_, attempt, rank),
                     fmt::format("{}.log", stream), error);
}

std::string JobDirectory::controller_log_path(std::string& error) const {
  return private_log(path_ + "/logs", "controller.log", error);
}

std::string JobDirectory::private_log(const std::string& folder, std::string_view name,
                                      std::string& error) const {
  if (!core::create_folders(*fs_, folder, kPrivateFolder, error)) return {};
  const std::string path = fmt::format("{}/{}", folder, name);
  // Made here, private, so that whoever appends to it later (with its own
  // mode and the umask) finds it there.
  std::unique_ptr<core::WritableFile> file;
  if (const int failure = fs_->create_file(path, kPrivateFile, file)) {
    if (failure == EEXIST) return path;
    error = fmt::format("cannot create the log '{}': {}", path, core::errno_text(failure));
    return {};
  }
  if (const int failure = file->close()) {
    error = fmt::format("cannot create the log '{}': {}", path, core::errno_text(failure));
    return {};
  }
  return path;
}

std::vector<std::string> list_job_dirs(const std::string& root) {
  namespace fs = std::filesystem;
  const std::string base = strip_trailing_slashes(root);
  std::vector<std::string> names;
  std::error_code status;
  for (fs::directory_iterator it(base, status), end; !status && it != end; it.increment(status)) {
    std::error_code ignored;
    if (!it->is_directory(ignored)) continue;
    if (!fs::is_regular_file(it->path() / kStateFile, ignored)) continue;
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> dirs;
  dirs.reserve(names.size());
  for (const std::string& name : names) dirs.push_back(join_path(base, name));
  return dirs;
}

}  // namespace dslaunch::controller
