// In-group phases with direct (one-sided) steps, for the hierarchical compositions when every
// rank maps the windows of its own group (ScheduleRequest::groups_mappable: one direct
// transport per host). Messages then cross only between groups; inside a group a rank reads
// its peers' Scratch windows, ordered by counted signal/wait fences (see direct_pattern.h).
//
// Window protocol used by every helper here, per pair of group members: the writer fills a
// Scratch region and signals ("ready"); the reader waits, reads with kDirectRead/Reduce and
// signals back ("done"); the writer waits for every "done" before its operation ends, so the
// next operation may overwrite the window. Regions are fresh per phase (ScratchTop), so no
// region is rewritten within one operation.
#pragma once

#include <string>
#include <vector>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"

namespace weft {

// Appends `st` to rank r's steps, growing scratch counts to cover it (FitScratchStep).
inline void PushFitted(Schedule* s, int r, const Step& st) {
  s->ranks[r].steps.push_back(st);
  FitScratchStep(s, r, st);
}

// One signal from `from` to each of `to` (skipping itself), or one wait for each.
inline void SignalEach(Schedule* s, int from, const std::vector<int>& to) {
  for (int q : to)
    if (q != from) SignalOne(s->ranks[from], q);
}
inline void WaitEach(Schedule* s, int at, const std::vector<int>& from) {
  for (int q : from)
    if (q != at) WaitOne(s->ranks[at], q);
}

// Reduce to owners: every member of `group` holds n elements at `in` (element 0 of the
// vector at in.offset); owner l = group[l] (l < owners.size()) ends with slice l
// (owners[l] = {offset, count} within the vector) reduced over the group, in group order,
// at `out` + offset. Each member copies its vector into its window at `base` first.
inline void DirectReduceToOwners(Schedule* s, const std::vector<int>& group, size_t n,
                                 Region in, Region out, size_t base,
                                 const std::vector<std::pair<size_t, size_t>>& owners) {
  if (group.size() == 1) {  // alone: the owner's slices are its own input
    for (const auto& o : owners)
      if (o.second > 0)
        PushFitted(s, group[0], CopyStep(Region{in.buffer, in.offset + o.first, o.second},
                                         Region{out.buffer, out.offset + o.first, o.second}));
    return;
  }
  for (int r : group) PushFitted(s, r, CopyStep(Region{in.buffer, in.offset, n}, Tmp(base, n)));
  for (int r : group) SignalEach(s, r, group);                     // ready
  for (int r : group) WaitEach(s, r, group);
  for (size_t l = 0; l < owners.size() && l < group.size(); ++l) {
    const int owner = group[l];
    const size_t off = owners[l].first, cnt = owners[l].second;
    if (cnt == 0) continue;
    const Region dst{out.buffer, out.offset + off, cnt};
    for (size_t i = 0; i < group.size(); ++i)
      PushFitted(s, owner, InRankOrder(owner, group[i], i == 0, Tmp(base + off, cnt), dst));
  }
  for (int r : group) SignalEach(s, r, group);                     // done reading
}

// Owners share: owner l holds slice l (owners[l]) at `from` + offset; every other member
// reads it from the owner's window into `to` + offset. Owners copy their slice into their
// window at `base` + offset first. Runs after DirectReduceToOwners in the same operation: its
// "done" signals (one per pair, not yet consumed) are consumed here first; ends with every
// "done" consumed (windows free again).
inline void DirectShareFromOwners(Schedule* s, const std::vector<int>& group, Region from,
                                  Region to, size_t base,
                                  const std::vector<std::pair<size_t, size_t>>& owners) {
  const size_t k = std::min(owners.size(), group.size());
  if (group.size() == 1) return;  // nobody to share with; `from` is `to` in the compositions
  for (size_t l = 0; l < k; ++l)
    if (owners[l].second > 0)
      PushFitted(s, group[l], CopyStep(
          Region{from.buffer, from.offset + owners[l].first, owners[l].second},
          Tmp(base + owners[l].first, owners[l].second)));
  for (int r : group) SignalEach(s, r, group);                     // ready
  for (int r : group) {
    WaitEach(s, r, group);  // DirectReduceToOwners' "done"
    WaitEach(s, r, group);  // "ready"
  }
  for (size_t i = 0; i < group.size(); ++i)
    for (size_t l = 0; l < k; ++l) {
      if (l == i || owners[l].second == 0) continue;
      const size_t off = owners[l].first, cnt = owners[l].second;
      PushFitted(s, group[i],
          DirectStep(group[l], Tmp(base + off, cnt), Region{to.buffer, to.offset + off, cnt}, false));
    }
  for (int r : group) SignalEach(s, r, group);                     // done reading
  for (int r : group) WaitEach(s, r, group);
}

// Applicability of the hierarchical_direct variants: every group's windows are mapped (one
// direct transport per host; all ranks mappable implies it) and there are at least two
// groups (on one host the flat direct algorithms serve better).
inline bool GroupsMappable(const ScheduleRequest& request) {
  return (request.groups_mappable || request.all_ranks_mappable) && request.groups.size() >= 2;
}

// The flat generator a composition embeds inside a group: "direct" for the direct variant
// (its sub-request marked mappable, as every group's windows are), else the first registered
// of `flat` (messages).
inline std::string InGroupAlgorithm(Collective collective, bool direct,
                                    std::initializer_list<const char*> flat) {
  return direct ? "direct" : FirstRegistered(collective, flat);
}
inline ScheduleRequest InGroupRequest(const ScheduleRequest& request, bool direct) {
  ScheduleRequest sub = request;
  sub.all_ranks_mappable = direct;
  return sub;
}

}  // namespace weft
