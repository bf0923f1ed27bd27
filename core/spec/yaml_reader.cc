#include "core/spec/yaml_reader.h"

#include <strings.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>

#include <fmt/format.h>

#include "core/spec/nearest_key.h"

namespace dslaunch::spec {
namespace {

constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";

// An explicit tag as the user wrote it (`!!str`, `!custom`); "" for none.
// yaml-cpp reports "?" for a plain scalar, "!" for a quoted one and "" for a
// JSON null: none of those is a tag the user wrote.
std::string explicit_tag(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  if (tag.empty() || tag == "?" || tag == "!") return "";
  if (tag.starts_with(kCoreTagPrefix)) return "!!" + tag.substr(kCoreTagPrefix.size());
  return tag;
}

std::string node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar: {
      const std::string tag = explicit_tag(node);
      return (tag.empty() ? "" : tag + " ") + "'" + node.Scalar() + "'";
    }
    default:
      return "nothing";
  }
}

// Whether the scalar's tag lets it be read as one of the YAML core types in
// `types` ("int", "float", "bool"): no explicit tag, or one of those. A
// `!!str 4` is the string "4", as YAML says, and not an integer.
bool tag_allows(const YAML::Node& node, std::initializer_list<std::string_view> types) {
  const std::string tag = explicit_tag(node);
  if (tag.empty()) return true;
  for (const std::string_view type : types) {
    if (tag == "!!" + std::string(type)) return true;
  }
  return false;
}

// A decimal number as YAML and JSON write it: an optional sign, digits with
// at most one '.', and an optional exponent. strtod alone would also take
// leading blanks, hex (0x10, 0x1p4), "inf" and "nan".
bool decimal_syntax(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t digits = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9') {
      ++digits;
    } else if (text[i] == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    const size_t exponent_start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == exponent_start) return false;
  }
  return i == text.size();
}

std::optional<int64_t> parse_integer(const std::string& text) {
  if (!decimal_syntax(text)) return std::nullopt;
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc() && ptr == end) return value;
  // DeepSpeed configs write sizes as floats ("reduce_bucket_size": 5e8).
  const double as_double = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(as_double) || as_double != std::floor(as_double) ||
      std::fabs(as_double) > 9.0e18) {
    return std::nullopt;
  }
  return static_cast<int64_t>(as_double);
}

std::optional<double> parse_number(const std::string& text) {
  if (!decimal_syntax(text)) return std::nullopt;
  const double value = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> integer_in(const YAML::Node& node) {
  if (!node.IsScalar() || !tag_allows(node, {"int", "float"})) return std::nullopt;
  return parse_integer(node.Scalar());
}

std::optional<double> number_in(const YAML::Node& node) {
  if (!node.IsScalar() || !tag_allows(node, {"int", "float"})) return std::nullopt;
  return parse_number(node.Scalar());
}

// Hugging Face's DeepSpeed integration writes "auto" for values its Trainer
// fills in; dslaunch has no such trainer, so say so rather than "not a number".
std::string bad_value_message(std::string_view path, const YAML::Node& value,
                              std::string_view expected) {
  if (value.IsScalar() && explicit_tag(value).empty() &&
      strcasecmp(value.Scalar().c_str(), "auto") == 0) {
    return fmt::format(
        "{} is 'auto', which the Hugging Face Trainer fills in; give dslaunch {} instead", path,
        expected);
  }
  return fmt::format("{} must be {}, got {}", path, expected, node_kind(value));
}

// "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a" -> "".
std::string parent_path(const std::string& path) {
  const auto cut = path.find_last_of(".[");
  return cut == std::string::npos ? std::string() : path.substr(0, cut);
}

std::string format_number(double value) { return fmt::format("{:g}", value); }

}  // namespace

ReadContext::ReadContext(std::string file, Diagnostics& diagnostics, SourceMap& locations)
    : file_(std::move(file)), diagnostics_(diagnostics), locations_(locations) {}

void ReadContext::set_origin(const std::string& path, Location origin) {
  origins_[path] = std::move(origin);
}

void ReadContext::set_file(const std::string& path, std::string file) {
  files_[path] = std::move(file);
}

Location ReadContext::location_of(const std::string& path, const YAML::Node& node) const {
  Location where;
  where.file = file_;
  for (std::string key = path; !key.empty(); key = parent_path(key)) {
    if (auto it = origins_.find(key); it != origins_.end()) return it->second;
    if (auto it = files_.find(key); it != files_.end()) {
      where.file = it->second;
      break;
    }
  }
  if (node.IsDefined() && !node.Mark().is_null()) {
    where.line = node.Mark().line + 1;
    where.column = node.Mark().column + 1;
  }
  return where;
}

std::optional<std::string> ReadContext::ignored_key_warning(const std::string& path) const {
  return ignored_keys_ ? ignored_keys_(path) : std::nullopt;
}

bool ReadContext::read_ok(const std::string& path) const {
  for (std::string key = path; !key.empty(); key = parent_path(key)) {
    if (failed_.count(key) > 0) return false;
  }
  return true;
}

MapReader::MapReader(ReadContext& context, YAML::Node node, std::string path)
    : context_(context), node_(std::move(node)), path_(std::move(path)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    context_.diagnostics().error(
        location(), fmt::format("{} must be a mapping of keys to values, got {}",
                                path_.empty() ? "the job spec" : path_, node_kind(node_)));
    context_.mark_failed(path_);
    node_ = YAML::Node();
  }
}

std::string MapReader::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

Location MapReader::location() const { return context_.location_of(path_, node_); }

Location MapReader::location_of(std::string_view key) const {
  const YAML::Node value = lookup(key);
  return value.IsDefined() ? context_.location_of(child_path(key), value) : location();
}

void MapReader::error(std::string_view key, std::string message) {
  context_.diagnostics().error(location_of(key), std::move(message));
}

void MapReader::warning(std::string_view key, std::string message) {
  context_.diagnostics().warning(location_of(key), std::move(message));
}

void MapReader::fail(std::string_view key, std::string message) {
  error(key, std::move(message));
  context_.mark_failed(child_path(key));
}

bool MapReader::read_ok(std::string_view key) const { return context_.read_ok(child_path(key)); }

YAML::Node MapReader::lookup(std::string_view key) const {
  if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return entry.second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool MapReader::has(std::string_view key) const {
  const YAML::Node value = lookup(key);
  return value.IsDefined() && !value.IsNull();
}

bool MapReader::is_list(std::string_view key) const { return lookup(key).IsSequence(); }

void MapReader::accept(std::string_view key) { declared_.emplace_back(key); }

std::vector<std::string> MapReader::keys() const {
  std::vector<std::string> out;
  if (!node_.IsMap()) return out;
  for (const auto& entry : node_) {
    if (entry.first.IsScalar()) out.push_back(entry.first.Scalar());
  }
  return out;
}

std::optional<std::string> MapReader::scalar(std::string_view key, std::string_view expected) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return std::nullopt;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  if (!value.IsScalar()) {
    fail(key, fmt::format("{} must be {}, got {}", path, expected, node_kind(value)));
    return std::nullopt;
  }
  return value.Scalar();
}

void MapReader::integer(std::string_view key, int64_t& out, int64_t min, int64_t max) {
  if (!scalar(key, "an integer")) return;
  const YAML::Node node = lookup(key);
  const auto value = integer_in(node);
  if (!value) {
    fail(key, bad_value_message(child_path(key), node, "an integer"));
  } else if (*value < min || *value > max) {
    fail(key, max == std::numeric_limits<int64_t>::max()
                  ? fmt::format("{} must be at least {}, got {}", child_path(key), min, *value)
                  : fmt::format("{} must be between {} and {}, got {}", child_path(key), min, max,
                                *value));
  } else {
    out = *value;
  }
}

void MapReader::integer(std::string_view key, int& out, int64_t min, int64_t max) {
  int64_t wide = out;
  integer(key, wide, min, std::min<int64_t>(max, std::numeric_limits<int>::max()));
  out = static_cast<int>(wide);
}

void MapReader::integer(std::string_view key, uint64_t& out) {
  int64_t wide = static_cast<int64_t>(out);
  integer(key, wide, 0, std::numeric_limits<int64_t>::max());
  out = static_cast<uint64_t>(wide);
}

void MapReader::optional_integer(std::string_view key, std::optional<int64_t>& out, int64_t min) {
  if (!has(key)) {
    accept(key);
    return;
  }
  int64_t value = std::numeric_limits<int64_t>::min();
  integer(key, value, min, std::numeric_limits<int64_t>::max());
  if (value != std::numeric_limits<int64_t>::min()) out = value;
}

void MapReader::number(std::string_view key, double& out, double min, double max) {
  const auto text = scalar(key, "a number");
  if (!text) return;
  const YAML::Node node = lookup(key);
  const auto value = number_in(node);
  if (!value) {
    fail(key, bad_value_message(child_path(key), node, "a number"));
  } else if (*value < min || *value > max) {
    fail(key, max == std::numeric_limits<double>::max()
                  ? fmt::format("{} must be at least {}, got {}", child_path(key),
                                format_number(min), *text)
                  : fmt::format("{} must be between {} and {}, got {}", child_path(key),
                                format_number(min), format_number(max), *text));
  } else {
    out = *value;
  }
}

void MapReader::boolean(std::string_view key, bool& out) {
  if (!scalar(key, "true or false")) return;
  const YAML::Node node = lookup(key);
  bool value = false;
  if (!tag_allows(node, {"bool"}) || !YAML::convert<bool>::decode(node, value)) {
    fail(key, bad_value_message(child_path(key), node, "true or false"));
    return;
  }
  out = value;
}

void MapReader::string(std::string_view key, std::string& out) {
  if (const auto text = scalar(key, "a string")) out = *text;
}

void MapReader::choice(std::string_view key, const std::vector<std::string>& choices, int& out) {
  const auto text = scalar(key, "a string");
  if (!text) return;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (strcasecmp(text->c_str(), choices[i].c_str()) == 0) {
      out = static_cast<int>(i);
      return;
    }
  }
  const std::string suggestion = nearest_key(*text, choices);
  fail(key,
       fmt::format("{} must be one of {}, got '{}'{}", child_path(key), fmt::join(choices, ", "),
                   *text, suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
}

void MapReader::number_list(std::string_view key, std::vector<double>& out) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  if (value.IsScalar()) {
    fail(key, bad_value_message(path, value, "a list of numbers"));
    return;
  }
  if (!value.IsSequence()) {
    fail(key, fmt::format("{} must be a list of numbers, got {}", path, node_kind(value)));
    return;
  }
  std::vector<double> numbers;
  for (const YAML::Node& item : value) {
    const auto number = number_in(item);
    if (!number) {
      fail(key, fmt::format("{} must be a list of numbers, got {}", path, node_kind(item)));
      return;
    }
    numbers.push_back(*number);
  }
  out = numbers;
}

void MapReader::scalar_list(std::string_view key, std::vector<ListScalar>& out) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  if (!value.IsSequence()) {
    fail(key, fmt::format("{} must be a list, got {}", path, node_kind(value)));
    return;
  }
  std::vector<ListScalar> items;
  for (const YAML::Node& item : value) {
    if (!item.IsScalar()) {
      fail(key, fmt::format("{} must be a list of single values, got {} in it", path,
                            node_kind(item)));
      return;
    }
    items.push_back({item.Scalar(), number_in(item)});
  }
  out = std::move(items);
}

void MapReader::choice_list(std::string_view key, const std::vector<std::string>& choices,
                            std::vector<std::string>& out) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  const std::string expected = fmt::format("a list of {}", fmt::join(choices, ", "));
  if (!value.IsSequence() || value.size() == 0) {
    fail(key, fmt::format("{} must be {}, got {}", path, expected, node_kind(value)));
    return;
  }
  std::vector<std::string> items;
  for (const YAML::Node& item : value) {
    const auto match =
        !item.IsScalar()
            ? choices.end()
            : std::find_if(choices.begin(), choices.end(), [&](const std::string& choice) {
                return strcasecmp(choice.c_str(), item.Scalar().c_str()) == 0;
              });
    if (match == choices.end()) {
      const std::string suggestion =
          item.IsScalar() ? nearest_key(item.Scalar(), choices) : std::string();
      fail(key, fmt::format("{} must be {}, got {}{}", path, expected, node_kind(item),
                            suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
      return;
    }
    if (std::find(items.begin(), items.end(), *match) != items.end()) {
      fail(key, fmt::format("{} lists '{}' twice", path, *match));
      return;
    }
    items.push_back(*match);
  }
  out = items;
}

void MapReader::integer_lists(std::string_view key, std::vector<std::vector<int>>& out, int min) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  const std::string expected = fmt::format("a list of lists of integers >= {}", min);
  if (!value.IsSequence()) {
    fail(key, fmt::format("{} must be {}, got {}", path, expected, node_kind(value)));
    return;
  }
  std::vector<std::vector<int>> lists;
  for (const YAML::Node& inner : value) {
    if (!inner.IsSequence()) {
      fail(key, fmt::format("{} must be {}, got {}", path, expected, node_kind(inner)));
      return;
    }
    std::vector<int> numbers;
    for (const YAML::Node& item : inner) {
      const auto number = integer_in(item);
      if (!number || *number < min || *number > std::numeric_limits<int>::max()) {
        fail(key, fmt::format("{} must be {}, got {}", path, expected, node_kind(item)));
        return;
      }
      numbers.push_back(static_cast<int>(*number));
    }
    lists.push_back(numbers);
  }
  out = lists;
}

void MapReader::string_map(
    std::string_view key, std::map<std::string, std::string>& out,
    const std::function<std::string(const std::string& name)>& name_problem) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (!value.IsDefined() || value.IsNull()) return;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  if (!value.IsMap()) {
    fail(key,
         fmt::format("{} must be a mapping of names to values, got {}", path, node_kind(value)));
    return;
  }
  std::map<std::string, Location> seen;
  for (const auto& entry : value) {
    const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    // Each name's own path, so that a --set of one name is located at its
    // --set text.
    const std::string name_path = path + "." + name;
    const Location where = context_.location_of(name_path, entry.first);
    const auto report = [&](std::string message) {
      context_.diagnostics().error(where, std::move(message));
      context_.mark_failed(name_path);
    };
    if (auto first = seen.find(name); first != seen.end()) {
      report(fmt::format("{} is given twice (first at {}); keep one", name_path,
                         first->second.to_string()));
      continue;
    }
    seen.emplace(name, where);
    if (!entry.first.IsScalar() || !entry.second.IsScalar()) {
      report(fmt::format("{} must map names to single values; '{}' maps to {}", path, name,
                         node_kind(entry.second)));
      continue;
    }
    if (name_problem) {
      if (std::string problem = name_problem(name); !problem.empty()) {
        report(std::move(problem));
        continue;
      }
    }
    out[name] = entry.second.Scalar();
  }
}

MapReader MapReader::map(std::string_view key) {
  accept(key);
  const YAML::Node value = lookup(key);
  if (value.IsDefined() && !value.IsNull()) {
    const std::string path = child_path(key);
    context_.locations().set(path, context_.location_of(path, value));
  }
  return MapReader(context_, value, child_path(key));
}

std::vector<MapReader> MapReader::map_list(std::string_view key) {
  accept(key);
  const YAML::Node value = lookup(key);
  std::vector<MapReader> items;
  if (!value.IsDefined() || value.IsNull()) return items;
  const std::string path = child_path(key);
  context_.locations().set(path, context_.location_of(path, value));
  if (!value.IsSequence()) {
    fail(key, fmt::format("{} must be a list of mappings, got {}", path, node_kind(value)));
    return items;
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const YAML::Node item = value[i];
    const std::string item_path = fmt::format("{}[{}]", path, i);
    if (!item.IsMap()) {
      context_.diagnostics().error(
          context_.location_of(item_path, item),
          fmt::format("{} must be a mapping, got {}", item_path, node_kind(item)));
      context_.mark_failed(item_path);
      continue;
    }
    items.emplace_back(context_, item, item_path);
  }
  return items;
}

void MapReader::finish() {
  if (!node_.IsMap()) return;
  std::map<std::string, Location> seen;
  for (const auto& entry : node_) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    const std::string path = child_path(key);
    const Location where = context_.location_of(path, entry.first);
    if (auto first = seen.find(key); first != seen.end()) {
      context_.diagnostics().error(where, fmt::format("{} is given twice (first at {}); keep one",
                                                      path, first->second.to_string()));
      continue;
    }
    seen.emplace(key, where);
    if (std::find(declared_.begin(), declared_.end(), key) != declared_.end()) continue;
    if (std::any_of(accepted_prefixes_.begin(), accepted_prefixes_.end(),
                    [&](const std::string& prefix) { return key.starts_with(prefix); })) {
      continue;
    }
    if (std::optional<std::string> warning = context_.ignored_key_warning(path)) {
      context_.diagnostics().warning(where, std::move(*warning));
      continue;
    }
    const std::string suggestion = nearest_key(key, declared_);
    const std::string section = path_.empty() ? "the job spec" : path_;
    context_.diagnostics().error(
        where, suggestion.empty() ? fmt::format("unknown key '{}' in {}; valid keys: {}", key,
                                                section, fmt::join(declared_, ", "))
                                  : fmt::format("unknown key '{}' in {}; did you mean '{}'?", key,
                                                section, suggestion));
  }
}

}  // namespace dslaunch::spec
