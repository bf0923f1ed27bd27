#include "launcher/controller/checkpoint_catalog.h"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "core/checkpoint/file_checksum.h"

namespace dslaunch::controller {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh, empty folder under $TEST_TMPDIR for one test.
std::string fresh_folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp ? tmp : "/tmp") / "checkpoint_catalog_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// A manifest for two ranks over 300 parameters, for the JSON checks: no
// shard files stand behind it (make_checkpoint writes real ones).
CheckpointManifest sample_manifest() {
  CheckpointManifest manifest;
  manifest.job_id = "demo-20240102-030405-00ff";
  manifest.spec_hash = "0123456789abcdef";
  manifest.step = 120;
  manifest.tokens_seen = 491520;
  manifest.samples_seen = 960;
  manifest.attempt = 2;
  manifest.data_parallel = 2;
  manifest.tensor_parallel = 1;
  manifest.pipeline_parallel = 1;
  manifest.zero_stage = 2;
  manifest.total_parameters = 300;
  manifest.data_positions =
      json::array({{{"rank", 0}, {"offset", 4096}}, {{"rank", 1}, {"offset", 8192}}});
  manifest.rng_states = json::array({"a1b2", "c3d4"});
  manifest.scheduler = {{"lr", 0.0003}, {"warmup_done", true}};
  manifest.loss_scaler = nullptr;
  manifest.model = {{"num_layers", 2}, {"hidden_size", 64}};
  manifest.created_unix_ms = 1712345678123;
  manifest.shards = {{0, "rank_0.bin", 600, "00000000000000aa", 0, 150},
                     {1, "rank_1.bin", 600, "00000000000000bb", 150, 300}};
  return manifest;
}

// Writes one shard file per entry of `contents` (rank_<r>.bin, 4 bytes a
// parameter) into <root>/step_<step> and, if `with_manifest`, its manifest.
std::string make_checkpoint(const std::string& root, int64_t step,
                            const std::vector<std::string>& contents, bool with_manifest = true) {
  const std::string dir = root + "/" + checkpoint_dir_name(step);
  fs::create_directories(dir);
  CheckpointManifest manifest = sample_manifest();
  manifest.step = step;
  manifest.data_parallel = static_cast<int>(contents.size());
  manifest.shards.clear();
  int64_t begin = 0;
  for (size_t rank = 0; rank < contents.size(); ++rank) {
    const std::string name = "rank_" + std::to_string(rank) + ".bin";
    write_file(dir + "/" + name, contents[rank]);
    std::string error;
    const auto checksum = core::file_xxh64(dir + "/" + name, error);
    REQUIRE(checksum);
    const int64_t end = begin + static_cast<int64_t>(contents[rank].size() / 4);
    manifest.shards.push_back({static_cast<int>(rank), name,
                               static_cast<int64_t>(contents[rank].size()), *checksum, begin, end});
    begin = end;
  }
  manifest.total_parameters = begin;
  if (with_manifest) {
    std::string error;
    REQUIRE(write_manifest(dir, manifest, error));
  }
  return dir;
}

std::string shard_bytes(char fill) { return std::string(4096, fill); }

std::string parse_error_of(const json& value) {
  std::string error;
  CHECK_FALSE(manifest_from_json(value, error));
  return error;
}

TEST_CASE("a manifest survives a JSON round trip") {
  const CheckpointManifest manifest = sample_manifest();
  const json value = manifest_to_json(manifest);
  CHECK(value["format_version"] == 2);
  CHECK(value["step"] == 120);
  CHECK(value["created_unix_ms"] == 1712345678123);
  CHECK(value["shards"][1] == json{{"rank", 1},
                                   {"path", "rank_1.bin"},
                                   {"size_bytes", 600},
                                   {"xxh64", "00000000000000bb"},
                                   {"begin", 150},
                                   {"end", 300}});
  CHECK(value["loss_scaler"].is_null());

  std::string error;
  const auto back = manifest_from_json(json::parse(value.dump()), error);
  REQUIRE(back);
  CHECK(error.empty());
  CHECK(back->job_id == "demo-20240102-030405-00ff");
  CHECK(back->spec_hash == "0123456789abcdef");
  CHECK(back->step == 120);
  CHECK(back->tokens_seen == 491520);
  CHECK(back->samples_seen == 960);
  CHECK(back->attempt == 2);
  CHECK(back->data_parallel == 2);
  CHECK(back->zero_stage == 2);
  CHECK(back->total_parameters == 300);
  CHECK(back->data_positions == manifest.data_positions);
  CHECK(back->rng_states == json::array({"a1b2", "c3d4"}));
  CHECK(back->scheduler["lr"] == 0.0003);
  CHECK(back->model == manifest.model);
  CHECK(back->created_unix_ms == 1712345678123);
  REQUIRE(back->shards.size() == 2);
  CHECK(back->shards[0].path == "rank_0.bin");
  CHECK(back->shards[0].xxh64 == "00000000000000aa");
  CHECK(back->shards[1].rank == 1);
  CHECK(back->shards[1].begin == 150);
  CHECK(back->shards[1].end == 300);
  CHECK(manifest_to_json(*back) == value);
}

TEST_CASE("a manifest with a missing field, a wrong type or an unknown version is rejected") {
  json value = manifest_to_json(sample_manifest());
  SECTION("missing field") {
    value.erase("tokens_seen");
    CHECK(parse_error_of(value) == "field 'tokens_seen' is missing");
  }
  SECTION("missing shard field") {
    value["shards"][1].erase("xxh64");
    CHECK(parse_error_of(value) == "field 'shards[1].xxh64' is missing");
  }
  SECTION("wrong types") {
    value["step"] = "120";
    CHECK(parse_error_of(value) == "field 'step' must be an integer, not string");
    value["step"] = 120.5;
    CHECK(parse_error_of(value) == "field 'step' must be an integer, not a fractional number");
    value["step"] = 120;
    value["job_id"] = 7;
    CHECK(parse_error_of(value) == "field 'job_id' must be a string, not number");
    value["job_id"] = "demo";
    value["shards"] = json::object();
    CHECK(parse_error_of(value) == "field 'shards' must be an array, not object");
    CHECK(parse_error_of(json::array()) == "the manifest must be a JSON object, not array");
  }
  SECTION("values out of range") {
    value["data_parallel"] = 0;
    CHECK(parse_error_of(value) == "field 'data_parallel' must be in 1..2147483647, not 0");
    value["data_parallel"] = 2;
    value["zero_stage"] = 4;
    CHECK(parse_error_of(value) == "field 'zero_stage' must be in 0..3, not 4");
    value["zero_stage"] = 1;
    value["shards"][0]["size_bytes"] = -1;
    CHECK(parse_error_of(value) == "field 'shards[0].size_bytes' must be at least 0, not -1");
  }
  SECTION("unknown version") {
    value["format_version"] = 3;
    CHECK(parse_error_of(value) ==
          "format_version 3 is not known (this dslaunch reads versions 1 to 2)");
    value["format_version"] = 0;
    CHECK(parse_error_of(value) ==
          "format_version 0 is not known (this dslaunch reads versions 1 to 2)");
  }
  SECTION("a shard outside the folder or with a bad checksum") {
    value["shards"][0]["path"] = "../other/rank_0.bin";
    CHECK(parse_error_of(value) ==
          "field 'shards[0].path' must be a relative path inside the checkpoint folder, not "
          "'../other/rank_0.bin'");
    value["shards"][0]["path"] = "rank_0.bin";
    value["shards"][0]["xxh64"] = "ABC";
    CHECK(parse_error_of(value) ==
          "field 'shards[0].xxh64' must be 16 lowercase hex digits, not 'ABC'");
  }
}

TEST_CASE("manifest shards must tile [0, total_parameters) in order") {
  json value = manifest_to_json(sample_manifest());
  SECTION("a gap between shards") {
    value["shards"][1]["begin"] = 160;
    CHECK(parse_error_of(value) ==
          "parameters [150, 160) are in no shard: a gap between shards[0] (rank 0) and shards[1] "
          "(rank 1)");
  }
  SECTION("an overlap") {
    value["shards"][1]["begin"] = 140;
    CHECK(parse_error_of(value) ==
          "shards[0] (rank 0) and shards[1] (rank 1) overlap: parameters [140, 150) are in both");
  }
  SECTION("a gap at the start or the end") {
    value["shards"][0]["begin"] = 10;
    CHECK(parse_error_of(value) ==
          "parameters [0, 10) are in no shard: a gap before shards[0] (rank 0)");
    value["shards"][0]["begin"] = 0;
    value["total_parameters"] = 320;
    CHECK(parse_error_of(value) ==
          "parameters [300, 320) are in no shard: a gap after shards[1] (rank 1) (total_parameters "
          "320)");
    value["total_parameters"] = 280;
    CHECK(parse_error_of(value) == "shards[1] (rank 1) ends at 300, past total_parameters 280");
  }
  SECTION("unsorted, duplicated or empty") {
    std::swap(value["shards"][0], value["shards"][1]);
    CHECK(
        parse_error_of(value) ==
        "shards are not sorted by begin: shards[1] (rank 0) begins at 0, before shards[0] (rank 1) "
        "at 150");
    std::swap(value["shards"][0], value["shards"][1]);
    value["shards"][1]["rank"] = 0;
    CHECK(parse_error_of(value) == "shards[1] (rank 0): rank 0 has more than one shard");
    value["shards"] = json::array();
    CHECK(parse_error_of(value) == "field 'shards' is empty");
  }
}

// Two tensor ranks, each slice of 200 parameters in two data-parallel shards.
CheckpointManifest tensor_parallel_manifest() {
  CheckpointManifest manifest = sample_manifest();
  manifest.tensor_parallel = 2;
  manifest.total_parameters = 350;  // the whole model, as one rank holds it
  manifest.shards.clear();
  for (int tensor = 0; tensor < 2; ++tensor) {
    for (int data = 0; data < 2; ++data) {
      ShardRecord shard{data * 2 + tensor, fmt::format("rank_{}.bin", data * 2 + tensor), 400,
                        "00000000000000aa", data * 100, data * 100 + 100};
      shard.tensor_rank = tensor;
      shard.slice_parameters = 200;
      manifest.shards.push_back(shard);
    }
  }
  return manifest;
}

TEST_CASE("a tensor-parallel manifest tiles every slice and round-trips its slices") {
  const json value = manifest_to_json(tensor_parallel_manifest());
  CHECK(value["shards"][2]["tensor_rank"] == 1);
  CHECK(value["shards"][2]["stage"] == 0);
  CHECK(value["shards"][2]["slice_parameters"] == 200);
  std::string error;
  const auto back = manifest_from_json(value, error);
  INFO(error);
  REQUIRE(back);
  CHECK(manifest_to_json(*back) == value);
  CHECK(back->shards[3].rank == 3);
  CHECK(back->shards[3].tensor_rank == 1);

  SECTION("a slice with a gap names the slice") {
    json broken = value;
    broken["shards"][3]["begin"] = 110;
    CHECK(parse_error_of(broken) ==
          "parameters [100, 110) of tensor rank 1 of stage 0 are in no shard: a gap between "
          "shards[2] (rank 1) and shards[3] (rank 3)");
  }
  SECTION("a missing slice") {
    json broken = value;
    broken["shards"].erase(3);
    broken["shards"].erase(2);
    CHECK(parse_error_of(broken) ==
          "the shards hold 1 slice(s) of the model, but tensor_parallel 2 x pipeline_parallel 1 "
          "makes 2");
  }
  SECTION("a slice outside the grid, or of two sizes") {
    json broken = value;
    broken["shards"][3]["tensor_rank"] = 2;
    CHECK(parse_error_of(broken) ==
          "shards[3] (rank 3) holds tensor rank 2 of stage 0, outside the manifest's "
          "tensor_parallel 2 x pipeline_parallel 1");
    broken = value;
    broken["shards"][3]["slice_parameters"] = 210;
    CHECK(parse_error_of(broken) ==
          "shards[3] (rank 3) says tensor rank 1 of stage 0 holds 210 parameters, shards[2] "
          "(rank 1) says 200");
  }
  SECTION("slices out of order") {
    json broken = value;
    std::swap(broken["shards"][1], broken["shards"][2]);
    CHECK_THAT(parse_error_of(broken),
               Catch::StartsWith("shards are not sorted by stage, tensor rank and begin"));
  }
}

TEST_CASE("checkpoint folder names carry the step, zero-padded to 8 digits") {
  CHECK(checkpoint_dir_name(120) == "step_00000120");
  CHECK(checkpoint_dir_name(0) == "step_00000000");
  CHECK(checkpoint_dir_name(123456789) == "step_123456789");
  CHECK(step_of_dir_name("step_00000120") == std::optional<int64_t>(120));
  CHECK(step_of_dir_name("step_123456789") == std::optional<int64_t>(123456789));
  CHECK_FALSE(step_of_dir_name("step_120"));
  CHECK_FALSE(step_of_dir_name("step_000000120"));
  CHECK_FALSE(step_of_dir_name("step_0000012x"));
  CHECK_FALSE(step_of_dir_name("step_00000120.tmp"));
  CHECK_FALSE(step_of_dir_name("latest"));
  CHECK_FALSE(step_of_dir_name(""));
}

TEST_CASE("a written manifest makes a valid checkpoint") {
  const std::string root = fresh_folder("valid");
  const std::string dir = make_checkpoint(root, 120, {shard_bytes('a'), shard_bytes('b')});
  CHECK_FALSE(fs::exists(dir + "/manifest.json.tmp"));
  CHECK(json::parse(read_file(dir + "/manifest.json"))["shards"][1]["begin"] == 1024);

  const CheckpointCheck check = check_checkpoint(dir + "/", true);
  CHECK(check.valid());
  CHECK(check.problem == "");
  CHECK(check.dir == dir);
  CHECK(check.step == 120);
  REQUIRE(check.manifest);
  CHECK(check.manifest->total_parameters == 2048);
  CHECK(check.manifest->shards[1].size_bytes == 4096);
}

TEST_CASE("a failed manifest write names the file and leaves no manifest.json") {
  const std::string root = fresh_folder("write_fails");
  std::string error;
  SECTION("the folder is missing") {
    CHECK_FALSE(write_manifest(root + "/step_00000120", sample_manifest(), error));
    CHECK(error ==
          "cannot write '" + root + "/step_00000120/manifest.json.tmp': No such file or directory");
  }
  SECTION("the disk takes only part of the file") {
    // RLIMIT_FSIZE cuts the write short after 16 bytes, as a full disk would.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit old_limit{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    rlimit small = old_limit;
    small.rlim_cur = 16;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const bool written = write_manifest(root, sample_manifest(), error);
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    CHECK_FALSE(written);
    CHECK(error == "cannot write '" + root + "/manifest.json.tmp': File too large");
    CHECK_FALSE(fs::exists(root + "/manifest.json.tmp"));
    CHECK_FALSE(fs::exists(root + "/manifest.json"));
  }
  SECTION("the manifest is invalid") {
    CheckpointManifest manifest = sample_manifest();
    manifest.total_parameters = 310;
    CHECK_FALSE(write_manifest(root, manifest, error));
    CHECK(error == "refusing to write '" + root +
                       "/manifest.json': parameters [300, 310) are in no shard: a gap after "
                       "shards[1] (rank 1) (total_parameters 310)");
    CHECK_FALSE(fs::exists(root + "/manifest.json"));
  }
}

TEST_CASE("check_checkpoint names what is wrong with a checkpoint") {
  const std::string root = fresh_folder("problems");
  const std::string dir = make_checkpoint(root, 120, {shard_bytes('a'), shard_bytes('b')});
  const std::string shard = dir + "/rank_1.bin";
  SECTION("no manifest") {
    fs::remove(dir + "/manifest.json");
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK_FALSE(check.valid());
    CHECK(check.step == 120);
    CHECK_FALSE(check.manifest);
    CHECK(check.problem ==
          "checkpoint step_00000120: no manifest.json (the save did not complete)");
  }
  SECTION("a truncated shard, found without checksums") {
    write_file(shard, std::string(1024, 'b'));
    const CheckpointCheck check = check_checkpoint(dir, false);
    CHECK(check.problem ==
          "checkpoint step_00000120: shard rank_1.bin is 1024 bytes, the manifest says 4096 "
          "(truncated?)");
    CHECK(check.manifest);
  }
  SECTION("a byte flipped in a shard") {
    std::string bytes = read_file(shard);
    bytes[100] ^= 0x01;
    write_file(shard, bytes);
    CHECK(check_checkpoint(dir, false).valid());
    std::string error;
    const std::string actual = *core::file_xxh64(shard, error);
    const std::string recorded = check_checkpoint(dir, false).manifest->shards[1].xxh64;
    CHECK(actual != recorded);
    CHECK(check_checkpoint(dir, true).problem ==
          "checkpoint step_00000120: shard rank_1.bin checksum " + actual +
              " does not match the manifest's " + recorded + " (corrupted)");
  }
  SECTION("a missing shard") {
    fs::remove(shard);
    CHECK(check_checkpoint(dir, false).problem ==
          "checkpoint step_00000120: shard rank_1.bin is missing");
  }
  SECTION("a manifest for another step") {
    fs::rename(dir, root + "/step_00000130");
    const CheckpointCheck check = check_checkpoint(root + "/step_00000130", true);
    CHECK(check.step == 130);
    CHECK(check.problem ==
          "checkpoint step_00000130: manifest.json says step 120, the folder name says step 130");
  }
  SECTION("a manifest that is not JSON") {
    write_file(dir + "/manifest.json", "{\"format_version\": 1, ");
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK(check.problem.rfind("checkpoint step_00000120: manifest.json is not valid JSON: "
                              "[json.exception.parse_error.101]",
                              0) == 0);
    CHECK(check.problem.find('\n') == std::string::npos);
  }
  SECTION("a manifest with a field missing") {
    json value = json::parse(read_file(dir + "/manifest.json"));
    value.erase("shards");
    write_file(dir + "/manifest.json", value.dump());
    CHECK(check_checkpoint(dir, true).problem ==
          "checkpoint step_00000120: manifest.json: field 'shards' is missing");
  }
}

TEST_CASE("checkpoints are listed newest first; a missing root has none") {
  CHECK(list_checkpoints(fresh_folder("list") + "/absent", true).empty());
  const std::string root = fresh_folder("list");
  make_checkpoint(root, 90, {shard_bytes('a')});
  make_checkpoint(root, 1000, {shard_bytes('b')}, /*with_manifest=*/false);
  make_checkpoint(root, 100, {shard_bytes('c')});
  fs::create_directories(root + "/step_120");  // not a checkpoint name
  write_file(root + "/step_00000200", "a file, not a folder");
  std::string error;
  REQUIRE(write_latest(root, 100, error));

  const std::vector<CheckpointCheck> checks = list_checkpoints(root, true);
  REQUIRE(checks.size() == 3);
  CHECK(checks[0].step == 1000);
  CHECK_FALSE(checks[0].valid());
  CHECK(checks[1].step == 100);
  CHECK(checks[1].valid());
  CHECK(checks[2].step == 90);
  CHECK(checks[2].dir == root + "/step_00000090");
}

TEST_CASE("the newest valid checkpoint is found past newer broken ones") {
  const std::string root = fresh_folder("newest_valid");
  SECTION("none at all") {
    const NewestValid none = find_newest_valid(root);
    CHECK_FALSE(none.found);
    CHECK(none.skipped.empty());
  }
  SECTION("the two newest are broken") {
    make_checkpoint(root, 100, {shard_bytes('a'), shard_bytes('b')});
    make_checkpoint(root, 200, {shard_bytes('c'), shard_bytes('d')});
    const std::string corrupted = make_checkpoint(root, 300, {shard_bytes('e'), shard_bytes('f')});
    make_checkpoint(root, 400, {shard_bytes('g'), shard_bytes('h')}, /*with_manifest=*/false);
    std::string bytes = read_file(corrupted + "/rank_0.bin");
    bytes[7] = 'x';
    write_file(corrupted + "/rank_0.bin", bytes);

    const NewestValid newest = find_newest_valid(root);
    REQUIRE(newest.found);
    CHECK(newest.found->step == 200);
    CHECK(newest.found->dir == root + "/step_00000200");
    CHECK(newest.found->valid());
    REQUIRE(newest.skipped.size() == 2);
    CHECK(newest.skipped[0].step == 400);
    CHECK(newest.skipped[0].problem ==
          "checkpoint step_00000400: no manifest.json (the save did not complete)");
    CHECK(newest.skipped[1].step == 300);
    CHECK(newest.skipped[1].problem.rfind("checkpoint step_00000300: shard rank_0.bin checksum ",
                                          0) == 0);
    CHECK(newest.skipped[1].problem.find("(corrupted)") != std::string::npos);
  }
}

TEST_CASE("only a folder without manifest.json counts as never committed") {
  const std::string root = fresh_folder("verdicts");
  const std::string dir = make_checkpoint(root, 100, {shard_bytes('a')});
  const std::string manifest = dir + "/manifest.json";
  SECTION("no manifest") {
    fs::remove(manifest);
    CHECK(check_checkpoint(dir, true).verdict == CheckpointVerdict::kNeverCommitted);
  }
  SECTION("a manifest that does not parse is committed data, broken") {
    const std::string text = read_file(manifest);
    write_file(manifest, text.substr(0, text.size() / 2));
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK(check.verdict == CheckpointVerdict::kBroken);
    CHECK_THAT(check.problem, Catch::Contains("manifest.json is not valid JSON"));
  }
  SECTION("a manifest nested past the depth cap is broken, not a crash") {
    write_file(manifest, std::string(200000, '[') + std::string(200000, ']'));
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK(check.verdict == CheckpointVerdict::kBroken);
    CHECK_THAT(check.problem, Catch::Contains("nest deeper than 64 levels"));
  }
  SECTION("a newer format cannot be judged here") {
    json value = json::parse(read_file(manifest));
    value["format_version"] = 3;
    value["shards"] = "whatever a newer dslaunch writes";
    write_file(manifest, value.dump());
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK(check.verdict == CheckpointVerdict::kUnusable);
    CHECK_THAT(check.problem, Catch::Contains("format_version 3, newer than the 2"));
    CHECK(check.recorded_model == sample_manifest().model);
  }
  SECTION("a manifest that exists but cannot be read cannot be judged") {
    if (geteuid() == 0) {
      // root reads a file whatever its mode: a folder in its place fails the read.
      fs::remove(manifest);
      fs::create_directory(manifest);
    } else {
      fs::permissions(manifest, fs::perms::none);
    }
    const CheckpointCheck check = check_checkpoint(dir, true);
    CHECK(check.verdict == CheckpointVerdict::kUnusable);
    CHECK_THAT(check.problem, Catch::Contains("cannot read manifest.json"));
  }
}

TEST_CASE("the search for a checkpoint stops at one of a newer format") {
  const std::string root = fresh_folder("newest_newer_format");
  make_checkpoint(root, 100, {shard_bytes('a')});
  const std::string newer = make_checkpoint(root, 200, {shard_bytes('b')});
  json value = json::parse(read_file(newer + "/manifest.json"));
  value["format_version"] = 7;
  write_file(newer + "/manifest.json", value.dump());
  const NewestValid newest = find_newest_valid(root);
  CHECK_FALSE(newest.found);
  CHECK_THAT(newest.error, Catch::Contains("checkpoint step_00000200: manifest.json has "
                                           "format_version 7"));
}

TEST_CASE("pruning never deletes a committed checkpoint that went bad") {
  const std::string root = fresh_folder("prune-broken");
  const std::string damaged = make_checkpoint(root, 100, {shard_bytes('a')});
  const std::string newer_format = make_checkpoint(root, 150, {shard_bytes('a')});
  make_checkpoint(root, 175, {shard_bytes('a')}, /*with_manifest=*/false);
  for (int step : {200, 300}) make_checkpoint(root, step, {shard_bytes('a')});
  write_file(damaged + "/manifest.json", "{\"format_version\": 1, ");
  json value = json::parse(read_file(newer_format + "/manifest.json"));
  value["format_version"] = 3;
  write_file(newer_format + "/manifest.json", value.dump());
  std::string error;
  const std::vector<std::string> removed = prune_checkpoints(root, 1, error);
  CHECK(error.empty());
  CHECK(removed == std::vector<std::string>{root + "/step_00000175", root + "/step_00000200"});
  CHECK(read_file(damaged + "/manifest.json") == "{\"format_version\": 1, ");
  CHECK(fs::exists(damaged + "/rank_0.bin"));
  CHECK(fs::exists(newer_format + "/rank_0.bin"));
}

TEST_CASE("latest names one checkpoint folder and is replaced whole") {
  const std::string root = fresh_folder("latest");
  CHECK_FALSE(read_latest(root));
  std::string error;
  REQUIRE(write_latest(root, 120, error));
  CHECK(read_file(root + "/latest") == "step_00000120\n");
  CHECK(read_latest(root) == std::optional<int64_t>(120));
  REQUIRE(write_latest(root + "/", 240, error));
  CHECK(read_file(root + "/latest") == "step_00000240\n");
  CHECK(read_latest(root) == std::optional<int64_t>(240));
  CHECK_FALSE(fs::exists(root + "/latest.tmp"));
  write_file(root + "/latest", "step_00000");
  CHECK_FALSE(read_latest(root));
  CHECK_FALSE(write_latest(root + "/absent", 1, error));
  CHECK(error == "cannot write '" + root + "/absent/latest.tmp': No such file or directory");
}

TEST_CASE("pruning keeps the newest valid checkpoints and saves in progress") {
  const std::string root = fresh_folder("prune");
  make_checkpoint(root, 50, {shard_bytes('z')}, /*with_manifest=*/false);  // older, invalid
  for (int step : {100, 200, 300, 400}) make_checkpoint(root, step, {shard_bytes('a')});
  make_checkpoint(root, 500, {shard_bytes('b')}, /*with_manifest=*/false);  // newer, partial
  std::string error;
  SECTION("keep 2") {
    const std::vector<std::string> removed = prune_checkpoints(root, 2, error);
    CHECK(error.empty());
    CHECK(removed == std::vector<std::string>{root + "/step_00000050", root + "/step_00000100",
                                              root + "/step_00000200"});
    std::vector<int64_t> left;
    for (const CheckpointCheck& check : list_checkpoints(root, true)) left.push_back(check.step);
    CHECK(left == std::vector<int64_t>{500, 400, 300});
    CHECK(fs::exists(root + "/step_00000500/rank_0.bin"));
    CHECK(prune_checkpoints(root, 2, error).empty());
  }
  SECTION("keep 0 still keeps the newest valid one") {
    const std::vector<std::string> removed = prune_checkpoints(root, 0, error);
    CHECK(error.empty());
    CHECK(removed.size() == 4);
    std::vector<int64_t> left;
    for (const CheckpointCheck& check : list_checkpoints(root, true)) left.push_back(check.step);
    CHECK(left == std::vector<int64_t>{500, 400});
  }
  SECTION("with no valid checkpoint nothing goes") {
    for (int step : {100, 200, 300, 400})
      fs::remove(root + "/" + checkpoint_dir_name(step) + "/manifest.json");
    CHECK(prune_checkpoints(root, 1, error).empty());
    CHECK(list_checkpoints(root, false).size() == 6);
  }
}

TEST_CASE("pruning after a commit leaves every folder newer than the step committed") {
  // Resumed from 200 because 400 went bad (same sizes, another checksum, so
  // pruning, which reads no checksums, takes it for valid); 300 is being
  // saved again. Committing 250 with keep 1 must leave 250, 300 and 400.
  const std::string root = fresh_folder("prune-anchored");
  for (int step : {100, 200, 250, 400}) make_checkpoint(root, step, {shard_bytes('a')});
  make_checkpoint(root, 300, {shard_bytes('b')}, /*with_manifest=*/false);
  std::string error;
  const std::vector<std::string> removed = prune_checkpoints(root, 1, error, 250);
  CHECK(error.empty());
  CHECK(removed == std::vector<std::string>{root + "/step_00000100", root + "/step_00000200"});
  std::vector<int64_t> left;
  for (const CheckpointCheck& check : list_checkpoints(root, false)) left.push_back(check.step);
  CHECK(left == std::vector<int64_t>{400, 300, 250});
}

TEST_CASE("a broken checkpoint is set aside under a name no listing counts") {
  const std::string root = fresh_folder("set-aside");
  const std::string first = make_checkpoint(root, 300, {shard_bytes('a')});
  std::string error;
  CHECK(set_aside_checkpoint(first, error) == first + ".broken");
  const std::string second = make_checkpoint(root, 300, {shard_bytes('b')});
  CHECK(set_aside_checkpoint(second + "/", error) == second + ".broken-2");
  CHECK(list_checkpoints(root, false).empty());
  CHECK(fs::exists(first + ".broken/manifest.json"));
  CHECK(set_aside_checkpoint(root + "/step_00000999", error).empty());
  CHECK_THAT(error, Catch::Contains("No such file or directory"));
}

TEST_CASE("the spec hash is the xxh64 of the text") {
  CHECK(spec_hash("") == "ef46db3751d8e999");
  CHECK(spec_hash("name: demo\n").size() == 16);
  CHECK(spec_hash("name: demo\n") == spec_hash("name: demo\n"));
  CHECK(spec_hash("name: demo\n") != spec_hash("name: demo2\n"));
}

}  // namespace
}  // namespace dslaunch::controller
