#include "topology/gpu_topology.h"

#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

using dslaunch::topology::parse_nvidia_smi_topo;

namespace {

using Islands = std::vector<std::vector<int>>;

// `nvidia-smi topo -m` on a DGX A100: all eight GPUs on the NVSwitch fabric,
// two ConnectX NICs per GPU pair, four populated NUMA nodes out of eight.
constexpr std::string_view kDgxA100 =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tmlx5_0\tmlx5_1\tmlx5_2\tmlx5_3\tmlx5_4\tml"
    "x5_5\tmlx5_6\tmlx5_7\tmlx5_8\tmlx5_9\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS"
    "\tSYS\tSYS\t48-63,176-191\t3\n"
    "GPU1\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS"
    "\tSYS\tSYS\t48-63,176-191\t3\n"
    "GPU2\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS"
    "\tSYS\tSYS\t16-31,144-159\t1\n"
    "GPU3\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS"
    "\tSYS\tSYS\t16-31,144-159\t1\n"
    "GPU4\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS"
    "\tSYS\tSYS\t112-127,240-255\t7\n"
    "GPU5\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS"
    "\tSYS\tSYS\t112-127,240-255\t7\n"
    "GPU6\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB"
    "\tSYS\tSYS\t80-95,208-223\t5\n"
    "GPU7\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB"
    "\tSYS\tSYS\t80-95,208-223\t5\n"
    "mlx5_0\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_1\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_2\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tSYS\tSYS\tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_3\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tSYS\tSYS\tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_4\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_5\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tSYS\tSYS\tSYS\t"
    "SYS\t\t\n"
    "mlx5_6\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tSYS\t"
    "SYS\t\t\n"
    "mlx5_7\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tSYS\t"
    "SYS\t\t\n"
    "mlx5_8\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \t"
    "PIX\t\t\n"
    "mlx5_9\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPIX\t"
    " X \t\t\n";

// A 4-GPU PCIe server: two GPUs behind each PCIe switch, one switch per socket.
constexpr std::string_view kPcieBox =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tPIX\tSYS\tSYS\t0-15,32-47\t0\n"
    "GPU1\tPIX\t X \tSYS\tSYS\t0-15,32-47\t0\n"
    "GPU2\tSYS\tSYS\t X \tPIX\t16-31,48-63\t1\n"
    "GPU3\tSYS\tSYS\tPIX\t X \t16-31,48-63\t1\n";

// Two 4-GPU NVLink islands (as on a DGX-1-like board without the cross
// links), copied out of a terminal that expanded the tabs into spaces. GPU3
// and GPU4 share a PCIe switch, which must not join the islands.
constexpr std::string_view kTwoIslandsWithSpaces =
    "        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    CPU Affinity    NUMA "
    "Affinity\n"
    "GPU0     X      NV4     NV4     NV4     SYS     SYS     SYS     SYS     0-23    0\n"
    "GPU1    NV4      X      NV4     NV4     SYS     SYS     SYS     SYS     0-23    0\n"
    "GPU2    NV4     NV4      X      NV4     SYS     SYS     SYS     SYS     0-23    0\n"
    "GPU3    NV4     NV4     NV4      X      PIX     SYS     SYS     SYS     0-23    0\n"
    "GPU4    SYS     SYS     SYS     PIX      X      NV4     NV4     NV4     24-47   1\n"
    "GPU5    SYS     SYS     SYS     SYS     NV4      X      NV4     NV4     24-47   1\n"
    "GPU6    SYS     SYS     SYS     SYS     NV4     NV4      X      NV4     24-47   1\n"
    "GPU7    SYS     SYS     SYS     SYS     NV4     NV4     NV4      X      24-47   1\n";

// A recent driver on a terminal: the header underlined with ANSI codes, NIC
// columns and rows, the "GPU NUMA ID" column, then the legends. Four PCIe
// A100s joined in pairs by NVLink bridges.
constexpr std::string_view kNicsAndLegend =
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tSYS\tSYS\tNODE\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tSYS\tSYS\tNODE\tSYS\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV12\tSYS\tNODE\t32-63,96-127\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV12\t X \tSYS\tNODE\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tNODE\tNODE\tSYS\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tSYS\tNODE\tNODE\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., "
    "QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
    "Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
    "\n";

}  // namespace

TEST_CASE("a DGX A100 is one NVSwitch island with its GPUs' NUMA nodes") {
  const auto topo = parse_nvidia_smi_topo(kDgxA100);
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(topo.numa_node == std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5});
}

TEST_CASE("without NVLink, GPUs behind one PCIe switch form the islands") {
  const auto topo = parse_nvidia_smi_topo(kPcieBox);
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 1}, {2, 3}});
  CHECK(topo.numa_node == std::vector<int>{0, 0, 1, 1});
}

TEST_CASE("a PXB link joins a PCIe island as PIX does") {
  const auto topo = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tPHB\tPXB\t0-7\t0\n"
      "GPU1\tPHB\t X \tPHB\t0-7\t0\n"
      "GPU2\tPXB\tPHB\t X \t0-7\t0\n");
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 2}, {1}});
}

TEST_CASE("two NVLink islands are read from space-aligned text and PCIe does not join them") {
  const auto topo = parse_nvidia_smi_topo(kTwoIslandsWithSpaces);
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(topo.numa_node == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
}

TEST_CASE("NIC rows, terminal escape codes and the legends are ignored") {
  const auto topo = parse_nvidia_smi_topo(kNicsAndLegend);
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 1}, {2, 3}});
  CHECK(topo.numa_node == std::vector<int>{0, 0, 1, 1});
}

TEST_CASE("GPUs with neither NVLink nor a shared switch are islands alone, N/A NUMA is -1") {
  const auto topo = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNODE\tSYS\t0-11\tN/A\n"
      "GPU1\tNODE\t X \tSYS\t0-11\tN/A\n"
      "GPU2\tSYS\tSYS\t X \t12-23\tN/A\n");
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0}, {1}, {2}});
  CHECK(topo.numa_node == std::vector<int>{-1, -1, -1});
}

TEST_CASE("a single GPU is one island") {
  const auto topo = parse_nvidia_smi_topo(
      "\tGPU0\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \t0-7\t0\n");
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0}});
  CHECK(topo.numa_node == std::vector<int>{0});
}

TEST_CASE("NVLink islands are components, listed by their smallest GPU") {
  // GPU2 reaches GPU0 only through GPU3: still one island.
  const auto topo = parse_nvidia_smi_topo(
      "GPU0 GPU1 GPU2 GPU3 CPU Affinity NUMA Affinity\n"
      "GPU0 X SYS SYS NV2 0-7 0\n"
      "GPU1 SYS X SYS SYS 0-7 0\n"
      "GPU2 SYS SYS X NV2 0-7 0\n"
      "GPU3 NV2 SYS NV2 X 0-7 0\n");
  REQUIRE(topo.error.empty());
  CHECK(topo.islands == Islands{{0, 2, 3}, {1}});
}

TEST_CASE("text without a GPU matrix is an error") {
  const std::string expected = "no GPU rows: expected the matrix printed by `nvidia-smi topo -m`";
  CHECK(parse_nvidia_smi_topo("").error == expected);
  CHECK(parse_nvidia_smi_topo("No devices were found\n").error == expected);
  CHECK(parse_nvidia_smi_topo("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n").error == expected);
  const auto legend_only =
      parse_nvidia_smi_topo(kNicsAndLegend.substr(kNicsAndLegend.find("Legend")));
  CHECK(legend_only.error == expected);
  CHECK(legend_only.islands.empty());
  CHECK(legend_only.numa_node.empty());
}

TEST_CASE("a ragged matrix is an error") {
  const auto short_row = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNV1\t0-7\t0\n"
      "GPU1\tNV1\t0-7\t0\n");
  CHECK(short_row.error == "ragged matrix: row GPU1 has 3 cells, the header names 4 columns");
  CHECK(short_row.islands.empty());
  CHECK(short_row.numa_node.empty());

  const auto missing_row = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNV1\tNV1\t0-7\t0\n"
      "GPU1\tNV1\t X \tNV1\t0-7\t0\n");
  CHECK(missing_row.error == "ragged matrix: the header names 3 GPUs but 2 rows follow");

  const auto extra_row = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tNV1\t0-7\t0\n"
      "GPU1\tNV1\t X \t0-7\t0\n"
      "GPU2\tNV1\tNV1\t0-7\t0\n");
  CHECK(extra_row.error == "ragged matrix: the header names 2 GPUs but 3 rows follow");

  const auto swapped_rows = parse_nvidia_smi_topo(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
      "GPU1\tNV1\t X \t0-7\t0\n"
      "GPU0\t X \tNV1\t0-7\t0\n");
  CHECK(swapped_rows.error == "ragged matrix: row GPU1 where GPU0 was expected");
}
