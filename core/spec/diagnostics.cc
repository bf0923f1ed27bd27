#include "core/spec/diagnostics.h"

#include <algorithm>
#include <cstddef>
#include <tuple>

#include <fmt/format.h>

#include "core/spec/terminal_text.h"

namespace dslaunch::spec {
namespace {

// "file:line:col: error: message", with the spec's text made safe to print.
std::string format_one(const Diagnostic& d) {
  return fmt::format("{}: {}: {}", terminal_safe(d.location.to_string()),
                     d.severity == Diagnostic::Severity::kError ? "error" : "warning",
                     terminal_safe(d.message));
}

}  // namespace

std::string Location::to_string() const {
  if (!origin.empty()) return origin;
  if (line > 0 && column > 0) return fmt::format("{}:{}:{}", file, line, column);
  if (line > 0) return fmt::format("{}:{}", file, line);
  return file;
}

void Diagnostics::error(const Location& where, std::string message) {
  diagnostics_.push_back({Diagnostic::Severity::kError, where, std::move(message)});
}

void Diagnostics::warning(const Location& where, std::string message) {
  diagnostics_.push_back({Diagnostic::Severity::kWarning, where, std::move(message)});
}

bool Diagnostics::has_errors() const {
  for (const Diagnostic& d : diagnostics_) {
    if (d.severity == Diagnostic::Severity::kError) return true;
  }
  return false;
}

std::vector<std::string> Diagnostics::warnings() const {
  std::vector<std::string> out;
  for (const Diagnostic& d : diagnostics_) {
    if (d.severity == Diagnostic::Severity::kWarning) {
      out.push_back(
          fmt::format("{}: {}", terminal_safe(d.location.to_string()), terminal_safe(d.message)));
    }
  }
  return out;
}

std::string Diagnostics::format() const {
  // Command-line problems first, then each file's in line order, as a reader
  // would fix them; checks run in another order.
  std::vector<Diagnostic> sorted = diagnostics_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic& a, const Diagnostic& b) {
    const auto key = [](const Location& l) {
      return std::tuple(l.origin.empty(), l.file, l.line, l.column);
    };
    return key(a.location) < key(b.location);
  });
  std::string out;
  const size_t shown = std::min(sorted.size(), kMaxFormatted);
  for (size_t i = 0; i < shown; ++i) out += format_one(sorted[i]) + "\n";
  if (shown == sorted.size()) return out;
  const auto errors = std::count_if(sorted.begin() + shown, sorted.end(), [](const Diagnostic& d) {
    return d.severity == Diagnostic::Severity::kError;
  });
  const auto warnings = static_cast<std::ptrdiff_t>(sorted.size() - shown) - errors;
  const auto count = [](std::ptrdiff_t n, const char* what) {
    return fmt::format("{} more {}{}", n, what, n == 1 ? "" : "s");
  };
  out += "... and ";
  if (errors > 0) out += count(errors, "error");
  if (errors > 0 && warnings > 0) out += " and ";
  if (warnings > 0) out += count(warnings, "warning");
  out += "\n";
  return out;
}

void SourceMap::set(const std::string& path, Location where) {
  locations_[path] = std::move(where);
}

Location SourceMap::find(const std::string& path) const {
  std::string key = path;
  while (true) {
    if (auto it = locations_.find(key); it != locations_.end()) return it->second;
    // The parents of "cluster.hosts[1].slots" are "cluster.hosts[1]",
    // "cluster.hosts" and "cluster".
    const auto cut = key.find_last_of(".[");
    if (cut == std::string::npos) return fallback_;
    key.resize(cut);
  }
}

}  // namespace dslaunch::spec
