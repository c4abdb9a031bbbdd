// Shared by the per-rank-count generators (allgatherv_*, reducescatterv_*): the request's
// count table checked once, and where each rank's block lies.
//
// Every rank holds the same v_counts (the communicator checks that before building), so every
// rank derives the same block sizes and both ends of a message agree on its size; empty blocks
// are skipped by sender and receiver alike.
#pragma once

#include <string>
#include <vector>

#include "algorithms/patterns.h"
#include "algorithms/ring_pattern.h"
#include "algorithms/registry.h"

namespace weft {

// The request's count table: v_counts (and, for allgatherv, v_displs) has one entry per rank,
// or both are empty: then every rank has `count` elements, packed (the even collective's
// layout, so that the suites that run every registered algorithm on even requests run these).
inline Status CheckVCountRequest(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  const size_t n = static_cast<size_t>(request.nranks);
  if (request.v_counts.empty() && request.v_displs.empty()) return OkStatus();
  if (request.v_counts.size() != n)
    return InvalidArgument(std::string(CollectiveName(request.collective)) + " needs nranks = " +
                           std::to_string(n) + " counts, got " +
                           std::to_string(request.v_counts.size()));
  if (request.collective == Collective::kAllGatherV && request.v_displs.size() != n)
    return InvalidArgument("allgatherv needs nranks = " + std::to_string(n) +
                           " displacements, got " + std::to_string(request.v_displs.size()));
  return OkStatus();
}

// Each rank's count: the table, or `count` for every rank when there is none.
inline std::vector<size_t> VCounts(const ScheduleRequest& request) {
  if (!request.v_counts.empty()) return request.v_counts;
  return std::vector<size_t>(static_cast<size_t>(request.nranks), request.count);
}

// Where each rank's block lies in the buffer that holds all of them: allgatherv's output
// (v_displs), reduce-scatterv's input and a table-less request's (back to back, prefix sums).
inline std::vector<size_t> VBlockOffsets(const ScheduleRequest& request) {
  if (request.collective == Collective::kAllGatherV && !request.v_displs.empty())
    return request.v_displs;
  const std::vector<size_t> counts = VCounts(request);
  std::vector<size_t> offsets(counts.size());
  size_t at = 0;
  for (size_t q = 0; q < offsets.size(); ++q) {
    offsets[q] = at;
    at += counts[q];
  }
  return offsets;
}

// One past the last element any non-empty block covers (the buffer's extent).
inline size_t VBlockExtent(const ScheduleRequest& request) {
  const std::vector<size_t> counts = VCounts(request), offsets = VBlockOffsets(request);
  size_t end = 0;
  for (size_t q = 0; q < offsets.size(); ++q)
    if (counts[q] > 0) end = std::max(end, offsets[q] + counts[q]);
  return end;
}

// The largest block (scratch for partial sums holds one).
inline size_t VLargestBlock(const ScheduleRequest& request) {
  size_t most = 0;
  for (size_t c : VCounts(request)) most = std::max(most, c);
  return most;
}

// A window that lets every chunk of the largest block be in flight, as BlockChunks::Window.
inline int VWindow(const ScheduleRequest& request) {
  return BlockChunks(VLargestBlock(request), request.chunk).Window();
}

}  // namespace weft
