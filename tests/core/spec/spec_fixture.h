#pragma once

// Helpers for the job-spec tests: a fresh folder per test under Bazel's
// $TEST_TMPDIR, spec text written there, and load_job_spec's results kept
// together so a test can assert on the spec, the diagnostics and the source map.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"
#include "core/spec/spec_parser.h"

namespace dslaunch::spec::testing {

// What load_job_spec returned for one spec file.
struct Loaded {
  std::string path;  // the spec file, as passed to load_job_spec
  JobSpec spec;
  Diagnostics diagnostics;
  SourceMap locations;

  // Diagnostics of one severity, in the order found.
  std::vector<Diagnostic> errors() const;
  std::vector<Diagnostic> warnings() const;

  // The only diagnostic whose message contains `needle`; fails the test
  // (REQUIRE) when there is none or more than one.
  const Diagnostic& only(std::string_view needle) const;
};

// A fresh, empty folder for one test, under $TEST_TMPDIR (or the system's
// temporary folder outside Bazel). Files written here outlive the object.
class SpecFolder {
 public:
  SpecFolder();

  const std::filesystem::path& dir() const { return dir_; }

  // Writes `text` to `name` (relative to the folder; parent folders are
  // created) and returns the file's path. A leading newline is dropped, so
  // that a raw string literal's first line is line 1 of the file.
  std::string write(const std::string& name, std::string_view text) const;

  // Writes `yaml` to `name` and loads it with `options`.
  Loaded load(std::string_view yaml, const LoadOptions& options = {},
              const std::string& name = "spec.yaml") const;

 private:
  std::filesystem::path dir_;
};

// Loads the spec file at `path` as dslaunch would.
Loaded load_file(const std::string& path, const LoadOptions& options = {});

// The warning `pin_memory: true` gets at ZeRO stage 3 in the offload
// section `section` ("offload_optimizer" or "offload_param"), found at `at`
// ("file:line:col"): stage 3 does not page-lock its host buffers yet.
inline std::string pin_memory_warning(const std::string& at, const std::string& section) {
  return at + ": training.zero_optimization." + section +
         ".pin_memory has no effect at ZeRO stage 3 yet: the parameters it gathers and the "
         "gradients it reduces pass through pageable host memory";
}

}  // namespace dslaunch::spec::testing
