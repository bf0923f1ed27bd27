#include "tests/core/spec/spec_fixture.h"

#include <atomic>
#include <cstdlib>
#include <fstream>

#include <unistd.h>
#include <catch2/catch.hpp>

namespace dslaunch::spec::testing {
namespace {

namespace fs = std::filesystem;

std::vector<Diagnostic> with_severity(const Diagnostics& diagnostics,
                                      Diagnostic::Severity severity) {
  std::vector<Diagnostic> out;
  for (const Diagnostic& d : diagnostics.all()) {
    if (d.severity == severity) out.push_back(d);
  }
  return out;
}

}  // namespace

std::vector<Diagnostic> Loaded::errors() const {
  return with_severity(diagnostics, Diagnostic::Severity::kError);
}

std::vector<Diagnostic> Loaded::warnings() const {
  return with_severity(diagnostics, Diagnostic::Severity::kWarning);
}

const Diagnostic& Loaded::only(std::string_view needle) const {
  const Diagnostic* found = nullptr;
  int count = 0;
  for (const Diagnostic& d : diagnostics.all()) {
    if (d.message.find(needle) != std::string::npos) {
      found = &d;
      ++count;
    }
  }
  INFO("looking for one diagnostic containing: " << needle);
  INFO("diagnostics:\n" << diagnostics.format());
  REQUIRE(count == 1);
  return *found;
}

SpecFolder::SpecFolder() {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path base = tmp != nullptr ? fs::path(tmp) : fs::temp_directory_path();
  dir_ = base / ("spec_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
}

std::string SpecFolder::write(const std::string& name, std::string_view text) const {
  if (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  const fs::path path = dir_ / name;
  fs::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary);
  file << text;
  REQUIRE(file.good());
  return path.string();
}

Loaded SpecFolder::load(std::string_view yaml, const LoadOptions& options,
                        const std::string& name) const {
  return load_file(write(name, yaml), options);
}

Loaded load_file(const std::string& path, const LoadOptions& options) {
  Loaded loaded;
  loaded.path = path;
  loaded.spec = load_job_spec(path, options, loaded.diagnostics, loaded.locations);
  return loaded;
}

}  // namespace dslaunch::spec::testing
