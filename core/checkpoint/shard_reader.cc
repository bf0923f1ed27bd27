// read_flat_range: a reader's part of the model state, assembled from the
// shards of any layout. Each of the reader's tensors maps its slice's
// elements to global elements (slice_runs); so does each shard's copy of
// that tensor; where the two meet, the shard's bytes are read.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checkpoint/open_shard.h"
#include "core/checkpoint/shard_file.h"

namespace dslaunch::core {
namespace {

using shard_internal::OpenShard;

// Reads are batched into spans of at most this many bytes of the shard.
constexpr int64_t kMaxSpanBytes = 64 << 20;

// A shard opened for reading, with its tensors by name.
struct SourceShard {
  const ShardLocation* location = nullptr;
  OpenShard open;
  const std::vector<LayoutTensor>* layout = nullptr;  // its own, or the reader's for format 1
  std::unordered_map<std::string, const LayoutTensor*> by_name;
  int array = -1;  // the index of the kind being read in its arrays
};

// Elements the reader needs and a shard holds: slice element `reader` of
// the reader's tensor is element `source` of the shard's slice.
struct Piece {
  int64_t reader = 0;
  int64_t source = 0;
  int64_t count = 0;
};

// The token embedding's rows past the vocabulary are padding, and Megatron
// pads the vocabulary to a multiple of make_vocab_size_divisible_by x the
// tensor ranks: layouts with different tensor sizes may hold it with
// different row counts. Such copies read each other: the rows both hold are
// read, and reader rows past the shard's are padding, zero.
bool padded_rows_differ(const LayoutTensor& held, const LayoutTensor& wanted) {
  return wanted.name == hf_gpt2_name(TensorRole::kWte, -1) && held.global_shape.size() == 2 &&
         wanted.global_shape.size() == 2 && held.global_shape[1] == wanted.global_shape[1];
}

// Where two increasing run lists cover the same global elements.
std::vector<Piece> overlap(const std::vector<SliceRun>& wanted, const std::vector<SliceRun>& held) {
  std::vector<Piece> pieces;
  size_t i = 0;
  size_t j = 0;
  while (i < wanted.size() && j < held.size()) {
    const SliceRun& w = wanted[i];
    const SliceRun& h = held[j];
    const int64_t begin = std::max(w.global, h.global);
    const int64_t end = std::min(w.global + w.count, h.global + h.count);
    if (begin < end) {
      pieces.push_back({w.local + (begin - w.global), h.local + (begin - h.global), end - begin});
    }
    if (w.global + w.count <= h.global + h.count) {
      ++i;
    } else {
      ++j;
    }
  }
  return pieces;
}

bool open_source(const ShardLocation& location, const std::vector<LayoutTensor>& reader,
                 StateKind kind, SourceShard& source, std::string& error) {
  source.location = &location;
  if (!shard_internal::open_shard(location.path, source.open, error)) return false;
  const ShardHeader& header = source.open.header;
  if (header.begin != location.begin || header.end != location.end) {
    error = fmt::format(
        "checkpoint shard '{}' holds [{}, {}), but the checkpoint lists it as holding [{}, {})",
        location.path, header.begin, header.end, location.begin, location.end);
    return false;
  }
  for (size_t i = 0; i < header.arrays.size(); ++i) {
    if (header.arrays[i].kind == kind) source.array = static_cast<int>(i);
  }
  if (source.array < 0) {
    error = fmt::format("checkpoint shard '{}' holds no {}", location.path, state_kind_name(kind));
    return false;
  }
  if (header.arrays[source.array].dtype != DType::kF32) {
    error = fmt::format("checkpoint shard '{}' holds {} in {}; it can be read only as fp32 here",
                        location.path, state_kind_name(kind),
                        dtype_name(header.arrays[source.array].dtype));
    return false;
  }
  if (header.format_version == 1) {
    // Format 1 saved the whole model's flat buffer, laid out as a reader
    // that holds every tensor whole lays it out.
    const int64_t reader_total = reader.empty() ? 0 : reader.back().offset + reader.back().numel;
    const bool whole = std::all_of(reader.begin(), reader.end(),
                                   [](const LayoutTensor& t) { return t.split.parts == 1; });
    if (!whole || reader_total != header.total_parameters) {
      error = fmt::format(
          "checkpoint shard '{}' is in format 1 (the whole model, {} parameters): it resumes only "
          "on a layout that holds the whole model, without tensor or pipeline parallelism",
          location.path, header.total_parameters);
      return false;
    }
    source.layout = &reader;
  } else {
    source.layout = &header.layout;
  }
  for (const LayoutTensor& tensor : *source.layout) source.by_name[tensor.name] = &tensor;
  return true;
}

// Reads the pieces (all from one shard's copy of one tensor) into `out`,
// the reader's slice elements starting at `out_first`.
bool read_pieces(const SourceShard& source, const LayoutTensor& held,
                 const std::vector<Piece>& pieces, float* out, int64_t out_first,
                 std::vector<float>& buffer, std::string& error) {
  const ShardHeader& header = source.open.header;
  const int64_t array_offset = source.open.array_offsets[source.array];
  // The shard's element for slice element `e` of `held`.
  const auto file_byte = [&](int64_t e) {
    return array_offset + (held.offset + e - header.begin) * static_cast<int64_t>(sizeof(float));
  };
  size_t first = 0;
  while (first < pieces.size()) {
    // Gather pieces while their span in the shard stays small.
    size_t last = first;
    while (last + 1 < pieces.size() &&
           (pieces[last + 1].source + pieces[last + 1].count - pieces[first].source) *
                   static_cast<int64_t>(sizeof(float)) <=
               kMaxSpanBytes) {
      ++last;
    }
    const int64_t span_begin = pieces[first].source;
    const int64_t span_end = pieces[last].source + pieces[last].count;
    std::string failed;
    if (first == last) {
      failed = shard_internal::read_exactly(
          source.open.fd->get(), reinterpret_cast<char*>(out + pieces[first].reader - out_first),
          pieces[first].count * static_cast<int64_t>(sizeof(float)), file_byte(span_begin));
    } else {
      buffer.resize(static_cast<size_t>(span_end - span_begin));
      failed = shard_internal::read_exactly(source.open.fd->get(),
                                            reinterpret_cast<char*>(buffer.data()),
                                            (span_end - span_begin) * static_cast<int64_t>(sizeof(float)),
                                            file_byte(span_begin));
      for (size_t p = first; p <= last && failed.empty(); ++p) {
        std::memcpy(out + pieces[p].reader - out_first, buffer.data() + pieces[p].source - span_begin,
                    pieces[p].count * sizeof(float));
      }
    }
    if (!failed.empty()) {
      error = fmt::format("cannot read checkpoint shard '{}': {}", source.location->path, failed);
      return false;
    }
    first = last + 1;
  }
  return true;
}

// Reads slice elements [from, to) of the reader's tensor `wanted` into out.
bool read_tensor(std::vector<SourceShard>& sources, const LayoutTensor& wanted, int64_t from,
                 int64_t to, float* out, std::vector<float>& buffer, std::string& error) {
  const std::vector<SliceRun> wanted_runs = slice_runs(wanted.split, from, to);
  // Which of [from, to) has been read, as sorted disjoint intervals.
  std::vector<std::pair<int64_t, int64_t>> covered;
  int64_t covered_count = 0;
  // Global elements from here on are padding the shards do not hold (see
  // padded_rows_differ); none when it stays past the tensor's end.
  int64_t padding_from = INT64_MAX;
  for (SourceShard& source : sources) {
    if (covered_count == to - from) break;
    const auto found = source.by_name.find(wanted.name);
    if (found == source.by_name.end()) continue;
    const LayoutTensor& held = *found->second;
    if (held.global_shape != wanted.global_shape && padded_rows_differ(held, wanted)) {
      padding_from = held.global_shape[0] * held.global_shape[1];
    } else if (held.global_shape != wanted.global_shape) {
      error = fmt::format("checkpoint shard '{}' holds {} with shape [{}], but this model's is [{}]",
                          source.location->path, wanted.name, fmt::join(held.global_shape, ", "),
                          fmt::join(wanted.global_shape, ", "));
      return false;
    }
    // The part of the shard's slice inside its array's range.
    const int64_t held_from = std::max<int64_t>(0, source.open.header.begin - held.offset);
    const int64_t held_to = std::min(held.numel, source.open.header.end - held.offset);
    if (held_from >= held_to) continue;
    std::vector<Piece> pieces = overlap(wanted_runs, slice_runs(held.split, held_from, held_to));
    // Leave out what another shard gave already (replicated tensors are in
    // several shards).
    std::vector<Piece> fresh;
    for (const Piece& piece : pieces) {
      int64_t at = piece.reader;
      const int64_t end = piece.reader + piece.count;
      for (const auto& [begin, stop] : covered) {
        if (stop <= at || begin >= end) continue;
        if (begin > at) fresh.push_back({at, piece.source + (at - piece.reader), begin - at});
        at = std::max(at, stop);
      }
      if (at < end) fresh.push_back({at, piece.source + (at - piece.reader), end - at});
    }
    if (fresh.empty()) continue;
    std::sort(fresh.begin(), fresh.end(),
              [](const Piece& a, const Piece& b) { return a.source < b.source; });
    if (!read_pieces(source, held, fresh, out, from, buffer, error)) return false;
    for (const Piece& piece : fresh) {
      covered.push_back({piece.reader, piece.reader + piece.count});
      covered_count += piece.count;
    }
    std::sort(covered.begin(), covered.end());
  }
  for (const SliceRun& run : wanted_runs) {
    const int64_t skip = std::max<int64_t>(0, padding_from - run.global);
    if (skip >= run.count) continue;
    std::fill(out + (run.local + skip - from), out + (run.local + run.count - from), 0.0f);
    covered.push_back({run.local + skip, run.local + run.count});
    covered_count += run.count - skip;
  }
  std::sort(covered.begin(), covered.end());
  if (covered_count != to - from) {
    int64_t first_missing = from;
    for (const auto& [begin, stop] : covered) {
      if (begin > first_missing) break;
      first_missing = std::max(first_missing, stop);
    }
    error = fmt::format("no checkpoint shard holds element {} of {} (its slice {} of {})",
                        first_missing, wanted.name, wanted.split.index, wanted.split.parts);
    return false;
  }
  return true;
}

}  // namespace

bool read_flat_range(const std::vector<ShardLocation>& shards,
                     const std::vector<LayoutTensor>& reader, StateKind kind, int64_t from,
                     int64_t to, float* out, std::string& error) {
  const int64_t total = reader.empty() ? 0 : reader.back().offset + reader.back().numel;
  if (from < 0 || from > to || to > total) {
    error = fmt::format("cannot read [{}, {}) from a checkpoint: not a range of the {} elements",
                        from, to, total);
    return false;
  }
  if (from == to) return true;
  std::vector<SourceShard> sources(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!open_source(shards[i], reader, kind, sources[i], error)) return false;
  }
  std::vector<float> buffer;
  for (const LayoutTensor& tensor : reader) {
    const int64_t begin = std::max(from, tensor.offset);
    const int64_t end = std::min(to, tensor.offset + tensor.numel);
    if (begin >= end) continue;
    if (!read_tensor(sources, tensor, begin - tensor.offset, end - tensor.offset,
                     out + (begin - from), buffer, error)) {
      return false;
    }
  }
  return true;
}

}  // namespace dslaunch::core
