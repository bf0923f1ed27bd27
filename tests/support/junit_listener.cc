// Writes a JUnit XML report with one <testcase> per Catch2 test case to the
// file Bazel names in XML_OUTPUT_FILE, so the test command can count test
// cases rather than test binaries. Catch2 v2 runs a single reporter per run;
// the console reporter stays for people reading the log, and this listener
// produces the machine-readable side.
//
// Under mpirun only world rank 0 writes; the other ranks' failures still fail
// the test through their exit codes.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

// The reporter and listener interfaces are only declared on request.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool is_reporting_rank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank == nullptr || std::string(rank) == "0";
}

struct CaseResult {
  std::string name;
  double seconds = 0;
  std::vector<std::string> failures;
};

class JUnitFileListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    current_ = CaseResult{info.name, 0, {}};
    started_ = std::chrono::steady_clock::now();
  }

  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const Catch::AssertionResult& result = stats.assertionResult;
    if (!result.isOk()) {
      const Catch::SourceLineInfo where = result.getSourceInfo();
      std::string text = std::string(where.file) + ":" + std::to_string(where.line) + ": ";
      text += result.hasExpression() ? result.getExpressionInMacro() + " with expansion " +
                                           result.getExpandedExpression()
                                     : result.getMessage();
      current_.failures.push_back(text);
    }
    return true;
  }

  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    current_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    if (stats.totals.testCases.failed > 0 && current_.failures.empty()) {
      current_.failures.push_back("test case failed");
    }
    cases_.push_back(current_);
  }

  void testRunEnded(Catch::TestRunStats const& stats) override {
    const char* path = std::getenv("XML_OUTPUT_FILE");
    if (path == nullptr || !is_reporting_rank()) return;
    int failed = 0;
    for (const CaseResult& c : cases_) failed += c.failures.empty() ? 0 : 1;
    std::ofstream xml(path);
    xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n";
    xml << "<testsuite name=\"" << xml_escape(stats.runInfo.name) << "\" tests=\"" << cases_.size()
        << "\" failures=\"" << failed << "\" errors=\"0\">\n";
    for (const CaseResult& c : cases_) {
      xml << "  <testcase name=\"" << xml_escape(c.name) << "\" time=\"" << c.seconds << "\"";
      if (c.failures.empty()) {
        xml << "/>\n";
        continue;
      }
      xml << ">\n";
      for (const std::string& failure : c.failures) {
        xml << "    <failure message=\"" << xml_escape(failure) << "\"/>\n";
      }
      xml << "  </testcase>\n";
    }
    xml << "</testsuite>\n</testsuites>\n";
  }

 private:
  CaseResult current_;
  std::chrono::steady_clock::time_point started_;
  std::vector<CaseResult> cases_;
};

}  // namespace

CATCH_REGISTER_LISTENER(JUnitFileListener)
