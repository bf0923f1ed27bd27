#include "topology/gpu_topology.h"

#include <charconv>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dslaunch::topology {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// The cells of one line. nvidia-smi separates them with tabs and pads the
// diagonal as " X "; copies pass through terminals and editors that turn tabs
// into runs of spaces (sometimes a single one), so any run of blanks
// separates. No cell of a GPU row contains a blank. nvidia-smi also wraps the
// header in ANSI underline codes when writing to a terminal; they are dropped.
std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t i = 0;
  while (i < line.size()) {
    if (is_blank(line[i])) {
      ++i;
    } else if (line[i] == '\x1b') {
      // A CSI sequence: ESC '[' parameters, ended by a letter.
      ++i;
      while (i < line.size() && !(line[i] >= '@' && line[i] <= '~' && line[i] != '[')) ++i;
      ++i;
    } else {
      const size_t begin = i;
      while (i < line.size() && !is_blank(line[i]) && line[i] != '\x1b') ++i;
      cells.push_back(line.substr(begin, i - begin));
    }
  }
  return cells;
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// The index in "GPU<index>", if `cell` names a GPU.
std::optional<int> gpu_index(std::string_view cell) {
  if (cell.substr(0, 3) != "GPU" || cell.size() == 3) return std::nullopt;
  return parse_int(cell.substr(3));
}

// How many columns (after the row label) the header names, and which one is
// "NUMA Affinity" (-1 if absent). Past the device columns the names hold
// blanks ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"); each ends with
// "Affinity" or "ID".
struct HeaderColumns {
  int count = 0;
  int numa = -1;
};

HeaderColumns header_columns(const std::vector<std::string_view>& header, size_t devices) {
  HeaderColumns columns{static_cast<int>(devices), -1};
  std::string_view previous;
  for (size_t i = devices; i < header.size(); ++i) {
    const std::string_view word = header[i];
    if (word == "Affinity" || word == "ID" || i + 1 == header.size()) {
      if (word == "Affinity" && previous == "NUMA") columns.numa = columns.count;
      ++columns.count;
    }
    previous = word;
  }
  return columns;
}

int find_root(std::vector<int>& parent, int gpu) {
  while (parent[gpu] != gpu) {
    parent[gpu] = parent[parent[gpu]];
    gpu = parent[gpu];
  }
  return gpu;
}

// Connected components of `linked`, each ascending, ordered by smallest GPU.
std::vector<std::vector<int>> components(const std::vector<std::vector<bool>>& linked) {
  const int n = static_cast<int>(linked.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      // The matrix should be symmetric; a link seen from either side counts.
      if (linked[i][j]) parent[find_root(parent, i)] = find_root(parent, j);
    }
  }
  std::vector<std::vector<int>> islands;
  std::vector<int> island_of_root(n, -1);
  for (int gpu = 0; gpu < n; ++gpu) {
    int& island = island_of_root[find_root(parent, gpu)];
    if (island < 0) {
      island = static_cast<int>(islands.size());
      islands.emplace_back();
    }
    islands[island].push_back(gpu);
  }
  return islands;
}

GpuTopology failure(std::string message) {
  GpuTopology result;
  result.error = std::move(message);
  return result;
}

}  // namespace

GpuTopology parse_nvidia_smi_topo(std::string_view text) {
  std::vector<std::vector<std::string_view>> lines;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(split_cells(text.substr(begin, end - begin)));
    begin = end + 1;
  }

  // The header names the GPU columns; a row starts with its GPU and then " X "
  // on the diagonal, so a line starting "GPU0" not followed by "X" is the header.
  size_t header = 0;
  while (header < lines.size() &&
         !(lines[header].size() >= 2 && lines[header][0] == "GPU0" && lines[header][1] != "X")) {
    ++header;
  }
  if (header == lines.size()) {
    return failure("no GPU rows: expected the matrix printed by `nvidia-smi topo -m`");
  }
  const std::vector<std::string_view>& names = lines[header];
  size_t gpus = 0;
  while (gpus < names.size() && gpu_index(names[gpus]) == static_cast<int>(gpus)) ++gpus;
  size_t devices = gpus;  // GPUs, then NICs, up to "CPU Affinity"
  while (devices < names.size() && names[devices] != "CPU") ++devices;
  const HeaderColumns columns = header_columns(names, devices);

  std::vector<const std::vector<std::string_view>*> rows;  // NIC rows and legend skipped
  for (size_t i = header + 1; i < lines.size(); ++i) {
    if (!lines[i].empty() && gpu_index(lines[i][0])) rows.push_back(&lines[i]);
  }
  if (rows.empty()) {
    return failure("no GPU rows: expected the matrix printed by `nvidia-smi topo -m`");
  }
  if (rows.size() != gpus) {
    return failure("ragged matrix: the header names " + std::to_string(gpus) + " GPUs but " +
                   std::to_string(rows.size()) + " rows follow");
  }

  GpuTopology result;
  std::vector<std::vector<bool>> nvlink(gpus, std::vector<bool>(gpus, false));
  std::vector<std::vector<bool>> pcie_switch(gpus, std::vector<bool>(gpus, false));
  bool any_nvlink = false;
  for (size_t gpu = 0; gpu < gpus; ++gpu) {
    const std::vector<std::string_view>& row = *rows[gpu];
    const std::string label(row[0]);
    if (gpu_index(label) != static_cast<int>(gpu)) {
      return failure("ragged matrix: row " + label + " where GPU" + std::to_string(gpu) +
                     " was expected");
    }
    if (row.size() != static_cast<size_t>(columns.count) + 1) {
      return failure("ragged matrix: row " + label + " has " + std::to_string(row.size() - 1) +
                     " cells, the header names " + std::to_string(columns.count) + " columns");
    }
    for (size_t j = 0; j < gpus; ++j) {
      const std::string_view link = row[j + 1];
      if (link.substr(0, 2) == "NV") {
        nvlink[gpu][j] = true;
        any_nvlink = true;
      } else if (link == "PIX" || link == "PXB") {
        pcie_switch[gpu][j] = true;
      }
    }
    const std::optional<int> numa =
        columns.numa < 0 ? std::nullopt : parse_int(row[columns.numa + 1]);
    result.numa_node.push_back(numa.value_or(-1));
  }
  result.islands = components(any_nvlink ? nvlink : pcie_switch);
  return result;
}

}  // namespace dslaunch::topology
