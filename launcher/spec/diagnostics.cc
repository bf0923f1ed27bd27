#include "launcher/spec/diagnostics.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace dslaunch::spec {

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
      out.push_back(fmt::format("{}: {}", d.location.to_string(), d.message));
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
  for (const Diagnostic& d : sorted) {
    out += fmt::format("{}: {}: {}\n", d.location.to_string(),
                       d.severity == Diagnostic::Severity::kError ? "error" : "warning", d.message);
  }
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
