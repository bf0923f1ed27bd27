#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/spec/diagnostics.h"

namespace dslaunch::spec {

// What every MapReader of one spec shares: where problems go, where values
// came from. Not thread-safe.
class ReadContext {
 public:
  ReadContext(std::string file, Diagnostics& diagnostics, SourceMap& locations);

  // Values at or under `path` came from the command line (a --set override,
  // --include, ...): they are located at `origin`, not in a file.
  void set_origin(const std::string& path, Location origin);

  // Values at or under `path` were read from `file` (the DeepSpeed JSON
  // config) rather than from the spec: their YAML marks are positions there.
  void set_file(const std::string& path, std::string file);

  // Where the value at `path` (held in `node`) came from: the nearest
  // origin or file set for `path` or a parent ("a.b[2].c" has the parents
  // "a.b[2]", "a.b" and "a"), else the spec file at the node's mark.
  Location location_of(const std::string& path, const YAML::Node& node) const;

  // Keys MapReader::finish() accepts with a warning instead of reporting
  // them unknown: `warning` returns the message for a full key path, or
  // nullopt for a key that is really unknown.
  using IgnoredKeys = std::function<std::optional<std::string>(const std::string& path)>;
  void set_ignored_keys(IgnoredKeys warning) { ignored_keys_ = std::move(warning); }
  std::optional<std::string> ignored_key_warning(const std::string& path) const;

  // Records that the value at `path` was present but could not be read (wrong
  // type, out of range, ...), so its default stands in. Checks that combine
  // several keys skip themselves when one of their inputs failed, rather than
  // report a second, false problem computed from a default.
  void mark_failed(const std::string& path) { failed_.insert(path); }
  // False when the value at `path`, or a mapping above it, failed to read.
  bool read_ok(const std::string& path) const;

  Diagnostics& diagnostics() { return diagnostics_; }
  SourceMap& locations() { return locations_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  Diagnostics& diagnostics_;
  SourceMap& locations_;
  std::map<std::string, Location> origins_;
  std::map<std::string, std::string> files_;
  IgnoredKeys ignored_keys_;
  std::set<std::string> failed_;
};

// Reads the keys of one YAML mapping into typed values, reporting every
// problem to the context's Diagnostics instead of stopping at the first:
// wrong types, values out of range, and — in finish() — keys nobody asked
// for (with the nearest valid key as a suggestion) and keys given twice.
//
// Every getter declares its key valid whether or not it is present, and
// leaves `out` unchanged when the key is absent, null or wrong, so the
// struct's defaults stand; a wrong value is also recorded (read_ok() turns
// false). A node that is absent is an empty mapping.
//
// Scalars: numbers are decimal only (`16`, `-2`, `0.5`, `5e8`; no hex, no
// blanks, no `.inf`), and an integer may be written as a whole float (`5e8`),
// as DeepSpeed configs do. A value tagged `!!str` is a string and never a
// number or a boolean. A quoted number ("16") is accepted as a number: YAML
// users quote by habit, JSON configs quote what they please, and nothing is
// ambiguous about what "16" means for a key that takes an integer.
class MapReader {
 public:
  MapReader(ReadContext& context, YAML::Node node, std::string path);

  bool has(std::string_view key) const;
  // Whether the value under `key` is a list.
  bool is_list(std::string_view key) const;

  void integer(std::string_view key, int64_t& out, int64_t min, int64_t max);
  void integer(std::string_view key, int& out, int64_t min, int64_t max);
  void integer(std::string_view key, uint64_t& out);
  void optional_integer(std::string_view key, std::optional<int64_t>& out, int64_t min);
  void number(std::string_view key, double& out, double min, double max);
  void boolean(std::string_view key, bool& out);
  void string(std::string_view key, std::string& out);
  // One of `choices`, matched without regard to case; `out` gets the index.
  void choice(std::string_view key, const std::vector<std::string>& choices, int& out);
  void number_list(std::string_view key, std::vector<double>& out);
  // A list of scalars, each with its number when it reads as one (see the
  // class comment): Megatron's blend [0.3, path, 0.7, path] mixes both.
  struct ListScalar {
    std::string text;
    std::optional<double> number;
  };
  void scalar_list(std::string_view key, std::vector<ListScalar>& out);
  // A non-empty list of distinct items from `choices` (case-insensitive),
  // stored in their canonical spelling.
  void choice_list(std::string_view key, const std::vector<std::string>& choices,
                   std::vector<std::string>& out);
  void integer_lists(std::string_view key, std::vector<std::vector<int>>& out, int min);
  // A mapping of names to single values. A name given twice is an error that
  // names the first; `name_problem`, when given, returns why a name is
  // refused ("" when it is fine), and refused names are left out of `out`.
  void string_map(std::string_view key, std::map<std::string, std::string>& out,
                  const std::function<std::string(const std::string& name)>& name_problem = {});

  // The mapping under `key` (an empty one when absent; an error when the
  // value is not a mapping).
  MapReader map(std::string_view key);
  // One reader per item of the list of mappings under `key` (paths like
  // "cluster.hosts[2]"); empty when absent; an error when not such a list.
  std::vector<MapReader> map_list(std::string_view key);

  // Declares keys this reader accepts but another part of the program reads.
  void accept(std::string_view key);
  // Accepts every key that starts with `prefix`, silently; such keys are not
  // offered as suggestions for unknown ones.
  void accept_prefix(std::string_view prefix) { accepted_prefixes_.emplace_back(prefix); }

  // The scalar keys of the mapping, in document order (duplicates included).
  std::vector<std::string> keys() const;

  // Whether the value under `key` was read without a problem (true when it
  // is absent): see ReadContext::mark_failed.
  bool read_ok(std::string_view key) const;

  // Reports unknown and duplicate keys; keys the context ignores get a
  // warning instead. Call once, after all getters.
  void finish();

  const std::string& path() const { return path_; }
  std::string child_path(std::string_view key) const;
  Location location() const;
  Location location_of(std::string_view key) const;
  void error(std::string_view key, std::string message);
  void warning(std::string_view key, std::string message);

 private:
  // The scalar under `key`, or nullopt (absent, null, or not a scalar —
  // the last reported as an error).
  std::optional<std::string> scalar(std::string_view key, std::string_view expected);
  YAML::Node lookup(std::string_view key) const;
  // Reports a value under `key` that could not be read, and records it.
  void fail(std::string_view key, std::string message);

  ReadContext& context_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> declared_;
  std::vector<std::string> accepted_prefixes_;
};

}  // namespace dslaunch::spec
