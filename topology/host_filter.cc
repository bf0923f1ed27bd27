#include "topology/host_filter.h"

#include "topology/text_fields.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace dslaunch::topology {
namespace {

// "1 host", "2 hosts".
std::string count_of(size_t count, std::string_view noun) {
  return std::to_string(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

std::vector<int> first_slots(int count) {
  std::vector<int> slots(std::max(count, 0));
  std::iota(slots.begin(), slots.end(), 0);
  return slots;
}

// What one filter names on a host: all of its slots (a bare host) or some.
struct Named {
  bool all_slots = false;
  std::vector<int> slots;  // sorted and distinct once the filter is parsed
};

// Indexed like the hostfile's entries; nullopt for a host the filter does not name.
using NamedByHost = std::vector<std::optional<Named>>;

// Parses `spec` (`what` is "include" or "exclude", for messages), merging repeated
// hosts, and appends every problem to `errors`.
NamedByHost parse_filter(std::string_view what, std::string_view spec,
                         const std::vector<HostfileEntry>& hosts,
                         const std::unordered_map<std::string_view, size_t>& index,
                         std::vector<std::string>& errors) {
  const std::string prefix = std::string(what) + ": ";
  NamedByHost named(hosts.size());
  std::unordered_set<std::string_view> unknown;  // to name each unknown host once
  for (const std::string_view element : split(spec, '@')) {
    if (element.empty()) {
      errors.push_back(prefix + "empty host in " + quoted(spec) +
                       "; join hosts with a single \"@\", as in \"worker-0@worker-1\"");
      continue;
    }
    const size_t colon = element.find(':');
    const std::string_view host = element.substr(0, colon);
    if (host.empty()) {
      errors.push_back(prefix + "no host name in " + quoted(element) +
                       "; write \"host\" or \"host:0,1\"");
      continue;
    }
    std::vector<int> slots;
    const bool all_slots = colon == std::string_view::npos;
    if (!all_slots) {
      const std::string_view list = element.substr(colon + 1);
      if (list.empty()) {
        errors.push_back(prefix + quoted(element) + " lists no slots; write " + quoted(host) +
                         " for all of its slots or " + quoted(std::string(host) + ":0,1") +
                         " for some");
        continue;
      }
      bool slots_ok = true;
      for (const std::string_view text : split(list, ',')) {
        int slot = 0;
        if (parse_whole_number(text, slot)) {
          slots.push_back(slot);
        } else {
          errors.push_back(prefix + "slot " + quoted(text) + " in " + quoted(element) +
                           " is not an integer; slots are GPU indices such as \"0,2\"");
          slots_ok = false;
        }
      }
      if (!slots_ok) continue;
    }
    const auto found = index.find(host);
    if (found == index.end()) {
      if (unknown.insert(host).second) {
        errors.push_back(prefix + "unknown host " + quoted(host) +
                         "; the hostfile does not list it");
      }
      continue;
    }
    std::optional<Named>& merged = named[found->second];
    if (!merged) merged.emplace();
    merged->all_slots = merged->all_slots || all_slots;
    merged->slots.insert(merged->slots.end(), slots.begin(), slots.end());
  }

  for (size_t i = 0; i < hosts.size(); ++i) {
    if (!named[i]) continue;
    std::vector<int>& slots = named[i]->slots;
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
    for (const int slot : slots) {
      if (slot < 0 || slot >= hosts[i].slots) {
        errors.push_back(prefix + "host " + quoted(hosts[i].host) + " has no slot " +
                         std::to_string(slot) + "; its slots are 0 to " +
                         std::to_string(hosts[i].slots - 1));
      }
    }
  }
  return named;
}

void check_count(std::string_view name, int count, std::vector<std::string>& errors) {
  if (count == 0 || count < -1) {
    errors.push_back(std::string(name) + " must be -1 (all) or at least 1, got " +
                     std::to_string(count));
  }
}

// The slots left on one host: those named by an include, or all but those named by
// an exclude.
std::vector<int> kept_slots(const HostfileEntry& host, const std::optional<Named>& named,
                            bool including) {
  if (including) {
    if (!named) return {};
    return named->all_slots ? first_slots(host.slots) : named->slots;
  }
  if (!named) return first_slots(host.slots);
  if (named->all_slots) return {};
  std::vector<int> kept;
  for (const int slot : first_slots(host.slots)) {
    if (!std::binary_search(named->slots.begin(), named->slots.end(), slot)) {
      kept.push_back(slot);
    }
  }
  return kept;
}

}  // namespace

ResourceSelection select_resources(const std::vector<HostfileEntry>& hosts,
                                   std::string_view include, std::string_view exclude,
                                   int num_nodes, int num_gpus) {
  ResourceSelection result;
  std::vector<std::string>& errors = result.errors;
  if (!include.empty() && !exclude.empty()) {
    errors.push_back("include and exclude cannot be used together; use one of them");
  }
  check_count("num_nodes", num_nodes, errors);
  check_count("num_gpus", num_gpus, errors);

  // Hash lookups keep filters over 16k-host hostfiles linear.
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < hosts.size(); ++i) index.emplace(hosts[i].host, i);
  const bool including = !include.empty();
  NamedByHost named(hosts.size());
  // Both filters are parsed even when both are given, so one run reports every mistake.
  if (including) named = parse_filter("include", include, hosts, index, errors);
  if (!exclude.empty()) {
    NamedByHost excluded = parse_filter("exclude", exclude, hosts, index, errors);
    if (!including) named = std::move(excluded);
  }
  if (!errors.empty()) return result;

  std::vector<HostSlots> selected;
  for (size_t i = 0; i < hosts.size(); ++i) {
    std::vector<int> slots = kept_slots(hosts[i], named[i], including);
    if (!slots.empty()) selected.push_back({hosts[i].host, std::move(slots)});
  }
  if (selected.empty()) {
    errors.push_back(
        "no hosts selected: no host in the hostfile has a slot left after include/exclude");
    return result;
  }

  if (num_nodes > static_cast<int>(selected.size())) {
    errors.push_back("num_nodes is " + std::to_string(num_nodes) + " but the selection has only " +
                     count_of(selected.size(), "host"));
  } else if (num_nodes != -1) {
    selected.resize(num_nodes);
  }
  if (num_gpus != -1) {
    const auto fewest = std::min_element(
        selected.begin(), selected.end(),
        [](const HostSlots& a, const HostSlots& b) { return a.slots.size() < b.slots.size(); });
    if (num_gpus > static_cast<int>(fewest->slots.size())) {
      errors.push_back("num_gpus is " + std::to_string(num_gpus) + " but host " +
                       quoted(fewest->host) + " has only " +
                       count_of(fewest->slots.size(), "selected slot"));
    } else {
      for (HostSlots& host : selected) host.slots.resize(num_gpus);
    }
  }
  if (errors.empty()) result.hosts = std::move(selected);
  return result;
}

}  // namespace dslaunch::topology
