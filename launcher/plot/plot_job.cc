#include "launcher/plot/plot_job.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "core/errno_status.h"
#include "core/json_input.h"
#include "launcher/capture_output.h"
#include "launcher/plot/training_series.h"

namespace dslaunch::plot {
namespace {

namespace fs = std::filesystem;

constexpr char kScriptFile[] = "plot.gp";

// A new private folder under $TMPDIR (or /tmp), removed with its contents
// when the object goes.
class ScratchFolder {
 public:
  static core::StatusOr<ScratchFolder> create() {
    std::error_code ignored;
    fs::path base = fs::temp_directory_path(ignored);
    if (base.empty()) base = "/tmp";
    std::string name = (base / "dslaunch-plot-XXXXXX").string();
    if (mkdtemp(name.data()) == nullptr) {
      return core::errno_status(
          errno, fmt::format("cannot create a temporary folder in {}", base.string()));
    }
    return ScratchFolder(name);
  }
  ScratchFolder(ScratchFolder&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  ScratchFolder& operator=(ScratchFolder&&) = delete;
  ~ScratchFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }

  std::string file(const char* name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  explicit ScratchFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

core::Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return core::errno_status(errno, fmt::format("cannot write {}", path));
  return core::Status();
}

// "<name> (job <id>)", or "job <id>" for a job without a name.
std::string plot_title(const nlohmann::json& state, const std::string& job_dir) {
  const auto text = [&](const char* key) {
    const auto value = state.find(key);
    return value != state.end() && value->is_string() ? value->get<std::string>() : "";
  };
  std::string id = text("job_id");
  if (id.empty()) id = fs::path(job_dir).filename().string();
  const std::string name = text("name");
  return name.empty() ? "job " + id : fmt::format("{} (job {})", name, id);
}

// What gnuplot printed, as a quote for an error message.
std::string quoted_output(const std::string& output) {
  std::string trimmed = output;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  if (trimmed.empty()) return "it printed nothing";
  std::string quote = "it said:";
  std::istringstream lines(trimmed);
  for (std::string line; std::getline(lines, line);) quote += "\n  " + line;
  return quote;
}

// Runs the script in `folder` and returns the PNG it drew.
core::StatusOr<std::string> run_gnuplot(const ScratchFolder& folder, const std::string& title,
                                        const PlotOptions& options) {
  const std::string script = folder.file(kScriptFile);
  const std::optional<launcher::CapturedOutput> ran = launcher::capture_output(
      {options.gnuplot, "-c", script, folder.path(), title}, options.gnuplot_timeout);
  if (!ran) {
    return core::failed_precondition(
        fmt::format("cannot run '{}' (not installed?): install gnuplot-nox (tools/setup.sh "
                    "installs it)",
                    options.gnuplot));
  }
  if (ran->timed_out) {
    return core::deadline_exceeded(fmt::format("gnuplot did not finish within {}s; {}",
                                               options.gnuplot_timeout.count(),
                                               quoted_output(ran->output)));
  }
  if (ran->exit_code != 0) {
    return core::internal_error(fmt::format("gnuplot failed (exit code {}) on {}; {}",
                                            ran->exit_code, script, quoted_output(ran->output)));
  }
  std::optional<std::string> image = read_file(folder.file(kImageFile));
  if (!image || image->empty()) {
    return core::internal_error(
        fmt::format("gnuplot drew no image; {}", quoted_output(ran->output)));
  }
  return std::move(*image);
}

}  // namespace

core::StatusOr<std::string> plot_job(const std::string& job_dir, const PlotOptions& options) {
  const std::string metrics_path = job_dir + "/metrics.jsonl";
  std::ifstream metrics(metrics_path, std::ios::binary);
  if (!metrics && !fs::exists(metrics_path)) {
    return core::failed_precondition(fmt::format(
        "no metrics yet: no {} (it is written from the first training step on)", metrics_path));
  }
  if (!metrics) return core::errno_status(errno, fmt::format("cannot read {}", metrics_path));
  const std::vector<StepPoint> steps = steps_from_metrics(metrics);
  if (steps.empty()) {
    return core::failed_precondition(
        fmt::format("no training step metrics of rank 0 yet in {} (only training jobs have them)",
                    metrics_path));
  }
  const std::string state_path = job_dir + "/state.json";
  const std::optional<std::string> state_text = read_file(state_path);
  if (!state_text) return core::errno_status(errno, fmt::format("cannot read {}", state_path));
  std::string parse_error;
  const std::optional<nlohmann::json> state = core::parse_untrusted_json(*state_text, parse_error);
  if (!state || !state->is_object()) {
    return core::invalid_argument(
        fmt::format("cannot parse {}: {}", state_path, state ? "not a JSON object" : parse_error));
  }

  core::StatusOr<ScratchFolder> folder = ScratchFolder::create();
  if (!folder.ok()) return folder.status();
  const std::vector<Restart> restarts = restarts_from_state(*state);
  for (const auto& [name, text] :
       {std::pair{kStepsFile, steps_data(steps)}, std::pair{kEvalFile, eval_data(steps)},
        std::pair{kScriptFile, gnuplot_script(steps, restarts, options.size)}}) {
    if (core::Status written = write_file(folder->file(name), text); !written.ok()) return written;
  }
  core::StatusOr<std::string> image = run_gnuplot(*folder, plot_title(*state, job_dir), options);
  if (!image.ok()) return image.status();

  const std::string output = options.output.empty() ? job_dir + "/plot.png" : options.output;
  std::string error;
  if (!core::write_file_atomically(output, *image, error)) {
    return core::Status(core::StatusCode::kIoError, error);
  }
  return output;
}

}  // namespace dslaunch::plot
