// Settings agreement (see settings_agreement.h): digests of the variables that decide what a
// rank runs, and the comparison that names the first one the ranks disagree on.
#include "core/settings_agreement.h"

#include <fstream>
#include <sstream>

#include "common/settings.h"
#include "topo/records.h"

namespace weft {
namespace {

// How a variable's value is compared.
enum class Agree { kValue, kFile };

struct AgreedSetting {
  const char* name;
  Agree how;
};

// Each decides, on its own rank, which schedule a call runs or whether an extra exchange
// happens. Left out on purpose: transport choices (TransportSettings::Agree already combines
// every rank's), WEFT_TINY_PATH (the same schedule, compiled or not), kernel ISA, timeouts,
// logging and spin policy (per-rank by nature).
const std::vector<AgreedSetting>& Agreed() {
  static const std::vector<AgreedSetting> rows = {
      {"WEFT_ALGO", Agree::kValue},        {"WEFT_TUNING_FILE", Agree::kFile},
      {"WEFT_LINK_TABLE", Agree::kFile},   {"WEFT_TOPO_FILE", Agree::kFile},
      {"WEFT_CALIBRATE", Agree::kValue},   {"WEFT_CHECK", Agree::kValue},
      {"WEFT_CHUNK_BYTES", Agree::kValue}, {"WEFT_COMPRESSION", Agree::kValue},
      {"WEFT_COMPRESSION_MIN_BYTES", Agree::kValue},
      {"WEFT_COMPRESSION_FEEDBACK", Agree::kValue},
      {"WEFT_COMPRESSION_CHUNK_BYTES", Agree::kValue},  // the pieces every rank cuts
  };
  return rows;
}

// The value as the library reads it: a flag or byte count parsed ("on" and "1" agree), a
// file's contents (two paths to equal files agree), else the text. Unset and empty are "".
std::string Canonical(const AgreedSetting& s) {
  const std::string text = SettingText(s.name);
  if (text.empty()) return "";
  const SettingInfo* row = FindSetting(s.name);
  if (row != nullptr && row->kind == SettingKind::kFlag) {
    StatusOr<bool> v = SettingFlag(s.name, false);
    if (v.ok()) return *v ? "flag:1" : "flag:0";
  }
  if (row != nullptr && row->kind == SettingKind::kBytes) {
    StatusOr<size_t> v = SettingBytes(s.name, 0);
    if (v.ok()) return "bytes:" + std::to_string(*v);
  }
  // A topology file may name a built-in preset instead of a file.
  if (s.how == Agree::kFile && text.rfind("preset:", 0) != 0) {
    std::ifstream in(text, std::ios::binary);
    if (in) {
      std::ostringstream contents;
      contents << in.rdbuf();
      return "file:" + contents.str();
    }
    // Unreadable here: its reader reports that; digest the path so equal paths still agree.
  }
  return "text:" + text;
}

std::string Quoted(const std::string& s) { return s.empty() ? "unset" : "\"" + s + "\""; }

}  // namespace

const std::vector<const char*>& AgreedSettingNames() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> n;
    for (const AgreedSetting& s : Agreed()) n.push_back(s.name);
    return n;
  }();
  return names;
}

std::vector<uint64_t> AgreedSettingDigests() {
  std::vector<uint64_t> digests;
  for (const AgreedSetting& s : Agreed()) {
    const std::string c = Canonical(s);
    digests.push_back(c.empty() ? 0 : Fnv1a(c));
  }
  return digests;
}

Status CompareAgreedSettings(const uint64_t* all, int nranks, int rank) {
  const size_t n = Agreed().size();
  const uint64_t* mine = all + static_cast<size_t>(rank) * n;
  for (size_t i = 0; i < n; ++i) {
    std::string differ;
    for (int r = 0; r < nranks; ++r)
      if (all[static_cast<size_t>(r) * n + i] != mine[i])
        differ += (differ.empty() ? "" : ",") + std::to_string(r);
    if (differ.empty()) continue;
    const AgreedSetting& s = Agreed()[i];
    const std::string what = s.how == Agree::kFile ? " (the file's contents are compared)" : "";
    return InvalidUsage(
        std::string(s.name) + " must be the same on every rank" + what + ": this rank (" +
        std::to_string(rank) + ") has " + Quoted(SettingText(s.name)) + ", rank(s) " + differ +
        " another value. It decides which schedule each rank runs, and ranks running different "
        "schedules would wait for each other until WEFT_TIMEOUT");
  }
  return OkStatus();
}

}  // namespace weft
