#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "launcher/spec/diagnostics.h"

namespace dslaunch::spec {

// What every MapReader of one spec shares: where problems go, where values
// came from. Not thread-safe.
class ReadContext {
 public:
  ReadContext(std::string file, Diagnostics& diagnostics, SourceMap& locations);

  // Values at or under `path` came from somewhere other than the spec file
  // (a --set override, the DeepSpeed JSON config).
  void set_origin(const std::string& path, Location origin);

  // Where the value at `path` (held in `node`) came from.
  Location location_of(const std::string& path, const YAML::Node& node) const;

  Diagnostics& diagnostics() { return diagnostics_; }
  SourceMap& locations() { return locations_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  Diagnostics& diagnostics_;
  SourceMap& locations_;
  std::map<std::string, Location> origins_;
};

// Reads the keys of one YAML mapping into typed values, reporting every
// problem to the context's Diagnostics instead of stopping at the first:
// wrong types, values out of range, and — in finish() — keys nobody asked
// for (with the nearest valid key as a suggestion) and keys given twice.
//
// Every getter declares its key valid whether or not it is present, and
// leaves `out` unchanged when the key is absent, null or wrong, so the
// struct's defaults stand. A node that is absent is an empty mapping.
class MapReader {
 public:
  MapReader(ReadContext& context, YAML::Node node, std::string path);

  bool has(std::string_view key) const;

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
  // A non-empty list of distinct items from `choices` (case-insensitive),
  // stored in their canonical spelling.
  void choice_list(std::string_view key, const std::vector<std::string>& choices,
                   std::vector<std::string>& out);
  void integer_lists(std::string_view key, std::vector<std::vector<int>>& out, int min);
  void string_map(std::string_view key, std::map<std::string, std::string>& out);

  // The mapping under `key` (an empty one when absent; an error when the
  // value is not a mapping).
  MapReader map(std::string_view key);
  // One reader per item of the list of mappings under `key` (paths like
  // "cluster.hosts[2]"); empty when absent; an error when not such a list.
  std::vector<MapReader> map_list(std::string_view key);

  // Declares keys this reader accepts but another part of the program reads.
  void accept(std::string_view key);

  // Reports unknown and duplicate keys. Call once, after all getters.
  void finish();

  const std::string& path() const { return path_; }
  std::string child_path(std::string_view key) const;
  Location location() const;
  Location location_of(std::string_view key) const;
  void error(std::string_view key, std::string message);

 private:
  // The scalar under `key`, or nullopt (absent, null, or not a scalar —
  // the last reported as an error).
  std::optional<std::string> scalar(std::string_view key, std::string_view expected);
  YAML::Node lookup(std::string_view key) const;

  ReadContext& context_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> declared_;
};

}  // namespace dslaunch::spec
