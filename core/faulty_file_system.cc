#include "core/faulty_file_system.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

namespace dslaunch::core {
namespace {

// One spelling per folder, so that a file's folder matches sync_folder's.
std::string normal_folder(const std::string& dir) {
  std::string normal = std::filesystem::path(dir).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

bool is_regular_file(const std::string& path, struct stat& info) {
  return ::lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

// A file created through the FaultyFileSystem: its calls are counted and
// may be broken, and what it writes and syncs is recorded.
class FaultyFileSystem::File final : public WritableFile {
 public:
  File(FaultyFileSystem& owner, size_t id, std::unique_ptr<WritableFile> file)
      : owner_(owner), id_(id), file_(std::move(file)) {}

  int write_some(std::string_view data, size_t& written) override {
    std::lock_guard lock(owner_.mutex_);
    const Verdict verdict = owner_.count(FileCall::kWrite);
    if (verdict.error_number != 0) return verdict.error_number;
    if (verdict.short_write) data = data.substr(0, std::max<size_t>(1, data.size() / 2));
    if (const int failure = file_->write_some(data, written)) return failure;
    owner_.files_[id_].written.append(data.substr(0, written));
    return 0;
  }

  int sync() override {
    std::lock_guard lock(owner_.mutex_);
    const Verdict verdict = owner_.count(FileCall::kSync);
    if (verdict.error_number != 0) return verdict.error_number;
    if (const int failure = file_->sync()) return failure;
    owner_.files_[id_].synced = owner_.files_[id_].written;
    return 0;
  }

  int close() override {
    std::lock_guard lock(owner_.mutex_);
    const Verdict verdict = owner_.count(FileCall::kClose);
    // The descriptor goes whatever the verdict, as close(2)'s does.
    const int result = file_->close();
    return verdict.error_number != 0 ? verdict.error_number : result;
  }

 private:
  FaultyFileSystem& owner_;
  const size_t id_;
  std::unique_ptr<WritableFile> file_;
};

void FaultyFileSystem::fail(FileCall call, int nth, int error_number) {
  std::lock_guard lock(mutex_);
  faults_.push_back({call, nth, {error_number, false, ""}, false});
}

void FaultyFileSystem::short_write(int nth) {
  std::lock_guard lock(mutex_);
  faults_.push_back({FileCall::kWrite, nth, {0, true, ""}, false});
}

void FaultyFileSystem::plant_link(int nth, const std::string& target) {
  std::lock_guard lock(mutex_);
  faults_.push_back({FileCall::kCreate, nth, {0, false, target}, false});
}

void FaultyFileSystem::crash_before(FileCall call, int nth) {
  std::lock_guard lock(mutex_);
  faults_.push_back({call, nth, {EIO, false, ""}, true});
}

bool FaultyFileSystem::crashed() const {
  std::lock_guard lock(mutex_);
  return crashed_;
}

int FaultyFileSystem::calls(FileCall call) const {
  std::lock_guard lock(mutex_);
  const auto found = calls_.find(call);
  return found == calls_.end() ? 0 : found->second;
}

FaultyFileSystem::Verdict FaultyFileSystem::count(FileCall call) {
  const int nth = ++calls_[call];
  if (crashed_) return {EIO, false, ""};
  for (const Fault& fault : faults_) {
    if (fault.call != call || fault.nth != nth) continue;
    if (fault.crash) crashed_ = true;
    return fault.verdict;
  }
  return {};
}

void FaultyFileSystem::track(const std::string& path) {
  if (live_.count(path) != 0) return;
  std::optional<size_t> id;
  struct stat info {};
  if (is_regular_file(path, info)) {
    std::ifstream file(path, std::ios::binary);
    Contents contents;
    contents.written.assign(std::istreambuf_iterator<char>(file), {});
    contents.synced = contents.written;
    contents.mode = info.st_mode & 07777;
    id = files_.size();
    files_.push_back(std::move(contents));
  }
  live_[path] = id;
  durable_[path] = id;
}

int FaultyFileSystem::create_file(const std::string& path, mode_t mode,
                                  std::unique_ptr<WritableFile>& file) {
  std::lock_guard lock(mutex_);
  const Verdict verdict = count(FileCall::kCreate);
  if (verdict.error_number != 0) return verdict.error_number;
  track(path);
  // Someone else's link: never tracked, left alone by power_cut.
  if (!verdict.link_target.empty()) (void)!::symlink(verdict.link_target.c_str(), path.c_str());
  std::unique_ptr<WritableFile> created;
  if (const int failure = base_.create_file(path, mode, created)) return failure;
  const size_t id = files_.size();
  Contents contents;
  contents.mode = mode;
  files_.push_back(std::move(contents));
  live_[path] = id;
  file = std::make_unique<File>(*this, id, std::move(created));
  return 0;
}

int FaultyFileSystem::rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  if (const Verdict verdict = count(FileCall::kRename); verdict.error_number != 0) {
    return verdict.error_number;
  }
  track(from);
  track(to);
  if (const int failure = base_.rename(from, to)) return failure;
  live_[to] = std::exchange(live_[from], std::nullopt);
  return 0;
}

int FaultyFileSystem::sync_folder(const std::string& dir) {
  std::lock_guard lock(mutex_);
  if (const Verdict verdict = count(FileCall::kSyncFolder); verdict.error_number != 0) {
    return verdict.error_number;
  }
  if (const int failure = base_.sync_folder(dir)) return failure;
  const std::string folder = normal_folder(dir);
  for (const auto& [path, id] : live_) {
    if (normal_folder(parent_folder(path)) == folder) durable_[path] = id;
  }
  return 0;
}

int FaultyFileSystem::remove(const std::string& path) {
  std::lock_guard lock(mutex_);
  if (const Verdict verdict = count(FileCall::kRemove); verdict.error_number != 0) {
    return verdict.error_number;
  }
  track(path);
  if (const int failure = base_.remove(path)) return failure;
  live_[path] = std::nullopt;
  return 0;
}

int FaultyFileSystem::make_folder(const std::string& path, mode_t mode) {
  std::lock_guard lock(mutex_);
  if (const Verdict verdict = count(FileCall::kMakeFolder); verdict.error_number != 0) {
    return verdict.error_number;
  }
  return base_.make_folder(path, mode);
}

void FaultyFileSystem::write_back(const std::string& path, const Contents& contents) {
  ::unlink(path.c_str());
  std::ofstream(path, std::ios::binary) << contents.synced;
  ::chmod(path.c_str(), contents.mode);
}

void FaultyFileSystem::power_cut() {
  std::lock_guard lock(mutex_);
  crashed_ = true;
  for (const auto& [path, id] : durable_) {
    struct stat info {};
    if (id) {
      write_back(path, files_[*id]);
    } else if (is_regular_file(path, info)) {
      ::unlink(path.c_str());
    }
  }
}

}  // namespace dslaunch::core
