#include "topology/host_filter.h"

#include "topology/text_fields.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace dslaunch::topology {
namespace {

// "1 host", "2 hosts".
std::string count_of(int64_t count, std::string_view noun) {
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

// Checks num_nodes or num_gpus; `filter` is "include" or "exclude" when one is
// given, else empty.
void check_count(std::string_view name, int count, std::string_view filter,
                 std::vector<std::string>& errors) {
  if (count == -1) return;
  if (!filter.empty()) {
    // DeepSpeed's runner raises "Cannot specify num_nodes/gpus with include/exclude": the
    // filter already says which hosts and slots to use, and counting on top of it would
    // silently pick some of them.
    errors.push_back(std::string(name) + " cannot be used with " + std::string(filter) +
                     ": DeepSpeed's launcher rejects num_nodes/num_gpus together with "
                     "include/exclude; choose the hosts and slots with " +
                     std::string(filter) + " alone (such as \"worker-0:0,1\") or drop " +
                     std::string(name));
    return;
  }
  if (count == 0 || count < -1) {
    errors.push_back(std::string(name) + " must be -1 (all) or at least 1, got " +
                     std::to_string(count));
  }
}

// Hostfile and Slurm hosts are checked when parsed; other sources (the spec's
// inline hosts) are checked here, since rankfiles and filters rely on the names.
void check_host_names(const std::vector<HostfileEntry>& hosts, std::vector<std::string>& errors) {
  for (const HostfileEntry& host : hosts) {
    if (valid_host_name(host.host)) continue;
    std::string message = host_name_problem(host.host);
    if (host.line > 0) message += " (declared on line " + std::to_string(host.line) + ")";
    errors.push_back(std::move(message));
  }
}

// How many slots one host keeps: those named by an include, or all but those
// named by an exclude. Counted without building them; `named` slots are
// already checked to be distinct and on the host.
int64_t kept_count(const HostfileEntry& host, const std::optional<Named>& named, bool including) {
  const int64_t all = std::max(host.slots, 0);
  if (including) {
    if (!named) return 0;
    return named->all_slots ? all : static_cast<int64_t>(named->slots.size());
  }
  if (!named) return all;
  return named->all_slots ? 0 : all - static_cast<int64_t>(named->slots.size());
}

// The first `count` (<= kept_count) of the slots one host keeps, ascending.
std::vector<int> kept_slots(const HostfileEntry& host, const std::optional<Named>& named,
                            bool including, int count) {
  if (!named) return first_slots(count);  // no filter names the host: all of its slots
  if (including) {
    if (named->all_slots) return first_slots(count);
    return {named->slots.begin(), named->slots.begin() + count};
  }
  std::vector<int> kept;
  kept.reserve(count);
  for (int slot = 0; slot < host.slots && static_cast<int>(kept.size()) < count; ++slot) {
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
  const std::string_view filter = !include.empty() ? "include" : !exclude.empty() ? "exclude" : "";
  check_count("num_nodes", num_nodes, filter, errors);
  check_count("num_gpus", num_gpus, filter, errors);
  check_host_names(hosts, errors);

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

  // Counts first, slot lists after: a host's slot count is bounded (kMaxSlotsPerHost
  // in hostfiles) but their sum is not, so the world size is checked before any
  // slot list is built.
  struct Kept {
    size_t host;    // index into `hosts`
    int64_t slots;  // how many it keeps
  };
  std::vector<Kept> kept;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const int64_t count = kept_count(hosts[i], named[i], including);
    if (count > 0) kept.push_back({i, count});
  }
  if (kept.empty()) {
    errors.push_back(
        "no hosts selected: no host in the hostfile has a slot left after include/exclude");
    return result;
  }

  if (num_nodes > static_cast<int>(kept.size())) {
    errors.push_back("num_nodes is " + std::to_string(num_nodes) + " but the selection has only " +
                     count_of(kept.size(), "host"));
  } else if (num_nodes != -1) {
    kept.resize(num_nodes);
  }
  if (num_gpus != -1) {
    const auto fewest = std::min_element(
        kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.slots < b.slots; });
    if (num_gpus > fewest->slots) {
      errors.push_back("num_gpus is " + std::to_string(num_gpus) + " but host " +
                       quoted(hosts[fewest->host].host) + " has only " +
                       count_of(fewest->slots, "selected slot"));
    } else {
      for (Kept& host : kept) host.slots = num_gpus;
    }
  }
  if (!errors.empty()) return result;

  int64_t world = 0;
  for (const Kept& host : kept) world += host.slots;
  if (world > kMaxWorldSize) {
    errors.push_back(std::to_string(world) + " ranks on " + std::to_string(kept.size()) +
                     " host(s) is more than dslaunch plans (" + std::to_string(kMaxWorldSize) +
                     "); check the slots in the hostfile, or select fewer with num_nodes, "
                     "num_gpus or include");
    return result;
  }

  result.hosts.reserve(kept.size());
  for (const Kept& host : kept) {
    const HostfileEntry& entry = hosts[host.host];
    // Each count is at most the world size, which fits an int.
    result.hosts.push_back(
        {entry.host, kept_slots(entry, named[host.host], including, static_cast<int>(host.slots)),
         entry.slots});
  }
  return result;
}

}  // namespace dslaunch::topology
