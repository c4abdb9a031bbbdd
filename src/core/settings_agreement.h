// Settings agreement: the WEFT_* variables that decide what a rank runs must be the same on
// every rank, and communicator creation checks that they are.
//
// Why: each rank plans its collectives alone, from the same inputs. A variable that changes the
// plan (WEFT_ALGO, a tuning or topology file, WEFT_CHECK's extra exchange, job-wide
// compression) set on some ranks only makes the ranks run different schedules. Message against
// message fails at once (the call tags differ), but a direct schedule's signals against another
// rank's messages meet nothing: both ranks waited for WEFT_TIMEOUT (300 s) before this check.
//
// How: every rank digests each such variable (the parsed value, or a file's contents, so two
// paths to equal files agree) and the digests travel in the init exchange that already carries
// the settings verdicts (core/init.cc). A difference fails creation on every rank with
// weftInvalidUsage naming the variable, this rank's value and the ranks that differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

// The variables that must agree, in the order of the digests.
const std::vector<const char*>& AgreedSettingNames();

// This rank's digest of each agreed variable (AgreedSettingNames order). Unset and empty
// digest alike. A value that does not parse digests as its text (ValidateSettings reports it).
std::vector<uint64_t> AgreedSettingDigests();

// Compares every rank's digests (nranks rows of AgreedSettingNames().size() words, row r at
// all + r * names) with this rank's row: OK, or weftInvalidUsage naming the first variable
// that differs, this rank's value and the ranks whose value differs from it.
Status CompareAgreedSettings(const uint64_t* all, int nranks, int rank);

}  // namespace weft
