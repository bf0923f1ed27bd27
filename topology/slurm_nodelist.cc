#include "topology/slurm_nodelist.h"

#include "topology/text_fields.h"

#include <charconv>
#include <cstdint>
#include <string_view>
#include <unordered_set>

namespace dslaunch::topology {
namespace {

// Far above any real allocation, low enough that a typo such as `node[1-999999999]`
// or `1(x999999999)` fails with a message instead of exhausting memory.
constexpr uint64_t kMaxNodes = uint64_t{1} << 20;

// Splits a node list at the commas outside brackets, which separate hosts; the
// commas inside separate ranges.
std::vector<std::string_view> split_hosts(std::string_view list, std::string& error) {
  std::vector<std::string_view> hosts;
  size_t start = 0;
  size_t open = std::string_view::npos;  // position of the unclosed `[`, if any
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    // Messages quote the host up to the offending bracket.
    if (c == '[' && open != std::string_view::npos) {
      error = "nested \"[\" in " + quoted(list.substr(start, i + 1 - start)) +
              "; Slurm node lists do not nest brackets";
      return {};
    }
    if (c == ']' && open == std::string_view::npos) {
      error = "unbalanced \"]\" in " + quoted(list.substr(start, i + 1 - start));
      return {};
    }
    if (c == '[') open = i;
    if (c == ']') open = std::string_view::npos;
    if (c == ',' && open == std::string_view::npos) {
      hosts.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (open != std::string_view::npos) {
    error = "unbalanced \"[\" in " + quoted(list.substr(start)) + "; close it with \"]\"";
    return {};
  }
  hosts.push_back(list.substr(start));
  return hosts;
}

// The numbers in one bracket group such as `01-03,07`, zero-padded to the width of
// each range's first bound as Slurm writes them (`08-10` gives 08, 09, 10).
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view host,
                                       std::string& error) {
  std::vector<std::string> numbers;
  for (const std::string_view range : split(ranges, ',')) {
    if (range.empty()) {
      error = "empty range in " + quoted(host) + "; write ranges such as \"[01-03,07]\"";
      return {};
    }
    const size_t dash = range.find('-');
    const std::string_view low_text = range.substr(0, dash);
    const std::string_view high_text =
        dash == std::string_view::npos ? low_text : range.substr(dash + 1);
    uint64_t low = 0;
    uint64_t high = 0;
    if (!parse_whole_number(low_text, low) || !parse_whole_number(high_text, high)) {
      error = "range " + quoted(range) + " in " + quoted(host) +
              " is not numeric; write a number such as \"7\" or a range such as \"01-03\"";
      return {};
    }
    if (high < low) {
      error = "descending range " + quoted(range) + " in " + quoted(host) +
              "; write the lower bound first";
      return {};
    }
    if (high - low >= kMaxNodes - numbers.size()) {
      error = "range " + quoted(range) + " in " + quoted(host) + " has more than " +
              std::to_string(kMaxNodes) + " nodes";
      return {};
    }
    for (uint64_t n = low; n <= high; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low_text.size()) digits.insert(0, low_text.size() - digits.size(), '0');
      numbers.push_back(std::move(digits));
    }
  }
  return numbers;
}

// Expands one host pattern such as `r[1-2]n[1-2]` into `out`: each bracket group
// multiplies the names so far, the leftmost group varying slowest.
void expand_host(std::string_view host, std::vector<std::string>& out, std::string& error) {
  if (host.empty()) {
    error = "empty host name; separate hosts with a single \",\"";
    return;
  }
  std::vector<std::string> names = {""};
  size_t pos = 0;
  while (pos < host.size()) {
    const size_t open = host.find('[', pos);
    const std::string_view literal = host.substr(pos, open - pos);
    for (std::string& name : names) name += literal;
    if (open == std::string_view::npos) break;
    const size_t close = host.find(']', open);  // split_hosts checked the balance
    const std::vector<std::string> numbers =
        expand_ranges(host.substr(open + 1, close - open - 1), host, error);
    if (!error.empty()) return;
    if (numbers.size() * names.size() > kMaxNodes - out.size()) {
      error = quoted(host) + " expands to more than " + std::to_string(kMaxNodes) + " nodes";
      return;
    }
    std::vector<std::string> product;
    product.reserve(names.size() * numbers.size());
    for (const std::string& name : names) {
      for (const std::string& number : numbers) product.push_back(name + number);
    }
    names = std::move(product);
    pos = close + 1;
  }
  for (std::string& name : names) out.push_back(std::move(name));
}

// One SLURM_TASKS_PER_NODE item: `count` or `count(xrepeat)`.
bool parse_tasks_item(std::string_view item, uint64_t& count, uint64_t& repeat) {
  const size_t paren = item.find('(');
  repeat = 1;
  if (paren != std::string_view::npos) {
    const std::string_view suffix = item.substr(paren);
    if (!suffix.starts_with("(x") || !suffix.ends_with(')') ||
        !parse_whole_number(suffix.substr(2, suffix.size() - 3), repeat)) {
      return false;
    }
  }
  return parse_whole_number(item.substr(0, paren), count);
}

// The first problem with the expanded names: one that is not a valid host name
// (the pattern's literal parts can hold anything), or one listed twice, which
// Slurm never does and which would place two ranks on each of its slots.
std::string check_names(const std::vector<std::string>& names) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(names.size());
  for (const std::string& name : names) {
    if (std::string problem = host_name_problem(name); !problem.empty()) return problem;
    if (!seen.insert(name).second) {
      return "node " + quoted(name) + " is listed twice; list each node once";
    }
  }
  return {};
}

}  // namespace

NodelistExpansion expand_nodelist(std::string_view nodelist) {
  NodelistExpansion result;
  if (nodelist.empty()) {
    result.error = "empty node list; expected host names such as \"node[01-03],login\"";
    return result;
  }
  const std::vector<std::string_view> hosts = split_hosts(nodelist, result.error);
  for (const std::string_view host : hosts) {
    expand_host(host, result.hosts, result.error);
    if (!result.error.empty()) break;
  }
  if (result.error.empty()) result.error = check_names(result.hosts);
  if (!result.error.empty()) {
    result.error += " (in node list " + quoted(nodelist) + ")";
    result.hosts.clear();
  }
  return result;
}

TasksPerNode expand_tasks_per_node(std::string_view tasks_per_node) {
  TasksPerNode result;
  const std::string expected = "; expected counts such as \"2(x3),1\"";
  if (tasks_per_node.empty()) {
    result.error = "empty tasks per node" + expected;
    return result;
  }
  for (const std::string_view item : split(tasks_per_node, ',')) {
    uint64_t count = 0;
    uint64_t repeat = 0;
    if (!parse_tasks_item(item, count, repeat)) {
      result.error = "malformed item " + quoted(item) + " in " + quoted(tasks_per_node) + expected;
      break;
    }
    if (count < 1 || repeat < 1) {
      result.error = "item " + quoted(item) + " in " + quoted(tasks_per_node) +
                     " has a count below 1; every node runs at least one task";
      break;
    }
    if (count > static_cast<uint64_t>(kMaxSlotsPerHost)) {
      result.error = "item " + quoted(item) + " in " + quoted(tasks_per_node) + " asks for " +
                     std::to_string(count) + " tasks on one node, more than the " +
                     std::to_string(kMaxSlotsPerHost) +
                     " slots one host may have; ask Slurm for fewer (--ntasks-per-node)";
      break;
    }
    if (repeat > kMaxNodes - result.counts.size()) {
      result.error = "item " + quoted(item) + " in " + quoted(tasks_per_node) +
                     " is too large: more than " + std::to_string(kMaxNodes) + " nodes";
      break;
    }
    result.counts.insert(result.counts.end(), repeat, static_cast<int>(count));
  }
  if (!result.error.empty()) result.counts.clear();
  return result;
}

std::optional<SlurmHosts> hosts_from_slurm_environment(
    const std::function<const char*(const char*)>& getenv) {
  const char* nodelist = getenv("SLURM_JOB_NODELIST");
  if (nodelist == nullptr) return std::nullopt;
  SlurmHosts result;
  NodelistExpansion nodes = expand_nodelist(nodelist);
  if (!nodes.error.empty()) {
    result.error = "SLURM_JOB_NODELIST: " + nodes.error;
    return result;
  }
  const char* tasks_text = getenv("SLURM_TASKS_PER_NODE");
  if (tasks_text == nullptr) {
    result.error =
        "SLURM_JOB_NODELIST is set but SLURM_TASKS_PER_NODE is not, so the slots per node are "
        "unknown; run under sbatch or salloc with --ntasks-per-node";
    return result;
  }
  const TasksPerNode tasks = expand_tasks_per_node(tasks_text);
  if (!tasks.error.empty()) {
    result.error = "SLURM_TASKS_PER_NODE: " + tasks.error;
    return result;
  }
  if (tasks.counts.size() != nodes.hosts.size()) {
    result.error = "SLURM_JOB_NODELIST lists " + std::to_string(nodes.hosts.size()) +
                   " nodes but SLURM_TASKS_PER_NODE describes " +
                   std::to_string(tasks.counts.size());
    return result;
  }
  for (size_t i = 0; i < nodes.hosts.size(); ++i) {
    result.hosts.push_back({std::move(nodes.hosts[i]), tasks.counts[i], 0});
  }
  if (const char* gpus = getenv("SLURM_GPUS_ON_NODE"); gpus != nullptr && *gpus != '\0') {
    const std::string_view text(gpus);
    int count = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (error != std::errc() || end != text.data() + text.size() || count < 0 ||
        count > kMaxSlotsPerHost) {
      result.error = "SLURM_GPUS_ON_NODE " + quoted(text) + " is not a number of GPUs";
      result.hosts.clear();
      return result;
    }
    result.gpus_per_node = count;
  }
  return result;
}

}  // namespace dslaunch::topology
