#include "core/spec/yaml_document.h"

#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <yaml-cpp/eventhandler.h>

namespace dslaunch::spec {
namespace {

Location at(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return Location{path, 0, 0, ""};
  return Location{path, mark.line + 1, mark.column + 1, ""};
}

// Notes where a document starts (its '---', else its first value) and
// whether it holds anything but null.
class DocumentProbe : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    has_content = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { has_content = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {
    has_content = true;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    has_content = true;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    has_content = true;
  }
  void OnMapEnd() override {}

  YAML::Mark start = YAML::Mark::null_mark();
  bool has_content = false;
};

}  // namespace

std::string yaml_shape_problem(const YAML::Node& root) {
  std::vector<std::pair<YAML::Node, int>> pending{{root, 0}};
  int64_t nodes = 0;
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    if (++nodes > kMaxYamlNodes) {
      return fmt::format("it holds more than {} values (counting each use of an alias)",
                         kMaxYamlNodes);
    }
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (depth + 1 >= kMaxYamlDepth) {
      return fmt::format("its maps and lists nest deeper than {} levels", kMaxYamlDepth);
    }
    for (const auto& item : node) {
      if (node.IsMap()) {
        pending.emplace_back(item.first, depth + 1);
        pending.emplace_back(item.second, depth + 1);
      } else {
        pending.emplace_back(item, depth + 1);
      }
    }
  }
  return "";
}

std::optional<YAML::Node> read_yaml_document(std::string_view text, const std::string& path,
                                             Diagnostics& diagnostics) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    diagnostics.error(at(path, e.mark), "YAML syntax error: " + e.msg);
    return std::nullopt;
  }
  if (const std::string problem = yaml_shape_problem(root); !problem.empty()) {
    diagnostics.error(Location{path, 0, 0, ""}, "the document is too large: " + problem);
    return std::nullopt;
  }
  // Look at the second document only, with the parser's events: LoadAll
  // would do, but loops without end on some malformed input.
  std::istringstream stream{std::string(text)};
  YAML::Parser parser(stream);
  DocumentProbe probe;
  try {
    if (parser.HandleNextDocument(probe) && parser.HandleNextDocument(probe) && probe.has_content) {
      diagnostics.error(at(path, probe.start),
                        "a second YAML document starts here, and a job spec is one document; "
                        "remove the '---' line to merge the two, or move this one to a file of "
                        "its own");
    }
  } catch (const YAML::Exception& e) {
    diagnostics.error(at(path, e.mark), "YAML syntax error: " + e.msg);
  }
  return root;
}

}  // namespace dslaunch::spec
