#include "core/spec/merge_keys.h"

#include <set>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace dslaunch::spec {
namespace {

// Far deeper than any job spec; it bounds the recursion on documents built
// to be deep (aliases can nest beyond yaml-cpp's parse depth). Merge keys
// below it are left alone, and then reported as unknown keys if read.
constexpr int kMaxDepth = 512;

bool is_merge_key(const YAML::Node& key) {
  // yaml-cpp tags a plain scalar "?" and a quoted one "!".
  return key.IsScalar() && key.Scalar() == "<<" &&
         (key.Tag() == "?" || key.Tag() == "tag:yaml.org,2002:merge");
}

std::string describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  return "nothing";
}

class MergeExpander {
 public:
  MergeExpander(const std::string& file, Diagnostics& diagnostics)
      : file_(file), diagnostics_(diagnostics) {}

  void expand(const YAML::Node& node, int depth) {
    if ((!node.IsMap() && !node.IsSequence()) || depth > kMaxDepth || !first_visit(node)) return;
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) expand(item, depth + 1);
      return;
    }
    // Below first, so that the mappings merged here have had their own
    // merge keys expanded.
    std::vector<YAML::Node> merge_values;
    std::vector<std::pair<YAML::Node, YAML::Node>> quoted;  // "<<" keys that are not merges
    for (const auto& entry : node) {
      expand(entry.second, depth + 1);
      if (is_merge_key(entry.first)) {
        merge_values.push_back(entry.second);
      } else if (entry.first.IsScalar() && entry.first.Scalar() == "<<") {
        quoted.emplace_back(entry.first, entry.second);
      }
    }
    if (merge_values.empty()) return;

    std::vector<YAML::Node> sources;
    for (const YAML::Node& value : merge_values) {
      if (value.IsMap()) {
        sources.push_back(value);
      } else if (value.IsSequence() && value.size() > 0) {
        for (const YAML::Node& item : value) {
          if (item.IsMap()) {
            sources.push_back(item);
          } else {
            report(item, describe(item));
          }
        }
      } else {
        report(value, value.IsSequence() ? "an empty list" : describe(value));
      }
    }
    // yaml-cpp removes by key text: take every "<<" out, then put the quoted
    // ones back.
    YAML::Node map = node;
    while (map.remove("<<")) {
    }
    for (const auto& [key, value] : quoted) map.force_insert(key, value);

    std::set<std::string> present;
    for (const auto& entry : map) {
      if (entry.first.IsScalar()) present.insert(entry.first.Scalar());
    }
    for (const YAML::Node& source : sources) {
      for (const auto& entry : source) {
        // A source still holding merge keys encloses this mapping (a cycle).
        if (is_merge_key(entry.first)) continue;
        if (entry.first.IsScalar() && !present.insert(entry.first.Scalar()).second) continue;
        map.force_insert(entry.first, entry.second);
      }
    }
  }

 private:
  // Whether `node` is seen for the first time. yaml-cpp exposes no node
  // identity but is(); nodes are bucketed by their position in the text
  // (an alias shares its anchor's node, and so its position).
  bool first_visit(const YAML::Node& node) {
    std::vector<YAML::Node>& bucket = seen_[node.Mark().pos];
    for (const YAML::Node& seen : bucket) {
      if (seen.is(node)) return false;
    }
    bucket.push_back(node);
    return true;
  }

  void report(const YAML::Node& value, const std::string& got) {
    Location where{file_, 0, 0, ""};
    if (!value.Mark().is_null()) {
      where.line = value.Mark().line + 1;
      where.column = value.Mark().column + 1;
    }
    diagnostics_.error(where, fmt::format("the merge key '<<' takes a mapping or a list of "
                                          "mappings, such as <<: *defaults; got {}",
                                          got));
  }

  const std::string& file_;
  Diagnostics& diagnostics_;
  std::unordered_map<int, std::vector<YAML::Node>> seen_;
};

}  // namespace

void expand_merge_keys(YAML::Node& root, const std::string& file, Diagnostics& diagnostics) {
  MergeExpander(file, diagnostics).expand(root, 0);
}

}  // namespace dslaunch::spec
