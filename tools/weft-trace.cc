// weft-trace: reads the flight-recorder dumps of every rank of a failed or hung job (the files
// WEFT_DEBUG_FILE named, or a log holding them: weftrun's output prefixes are fine) and names
// the first operation the ranks did not all complete, and who held it up: a rank that left no
// dump (stopped, hung or killed: it could not write one), a rank that never entered the
// operation, or ranks that entered different calls under one sequence number (diverged).
// PyTorch's fr_trace is the model.
//
//   weft-trace DUMP...
//
// Phases: parse every dump (header "weft flight recorder: rank R of N ...", entry lines
// "seq=S call=C algorithm=A ... state=X", "end of flight recorder"), then per rank the highest
// sequence it completed and the operations still open (RUNNING or FAILED), then the verdict.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Op {
  unsigned long long seq = 0;
  std::string call, algorithm, state;
};

struct RankDump {
  int rank = -1;
  int nranks = 0;
  std::string why;
  std::vector<Op> ops;
  unsigned long long done_max = 0;  // highest sequence completed
  unsigned long long first_open = 0;  // lowest sequence RUNNING or FAILED (0: none)
};

std::string Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  return line.substr(from, line.find(' ', from) - from);
}

// Every dump in `path`, in the order found. Returns false when the file cannot be read.
bool ParseFile(const std::string& path, std::vector<RankDump>* dumps) {
  std::ifstream in(path);
  if (!in) return false;
  static const std::regex header("weft flight recorder: rank ([0-9]+) of ([0-9]+) \\([^)]*\\) at [^ ]+: (.*)");
  RankDump* cur = nullptr;
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, header)) {
      dumps->push_back(RankDump());
      cur = &dumps->back();
      cur->rank = std::stoi(m[1]);
      cur->nranks = std::stoi(m[2]);
      cur->why = m[3];
    } else if (cur != nullptr && line.find("end of flight recorder") != std::string::npos) {
      cur = nullptr;
    } else if (cur != nullptr && line.find(" seq=") != std::string::npos) {
      Op op;
      op.seq = std::stoull(Field(line, "seq"));
      op.call = Field(line, "call");
      op.algorithm = Field(line, "algorithm");
      op.state = Field(line, "state");
      if (op.seq > 0) cur->ops.push_back(op);  // send/recv (seq 0) are not collective
    }
  }
  return true;
}

void Summarize(RankDump* d) {
  for (const Op& op : d->ops) {
    if (op.state == "done") d->done_max = std::max(d->done_max, op.seq);
    else if (d->first_open == 0 || op.seq < d->first_open) d->first_open = op.seq;
  }
}

const Op* Find(const RankDump& d, unsigned long long seq) {
  for (const Op& op : d.ops)
    if (op.seq == seq) return &op;
  return nullptr;
}

std::string List(const std::set<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// The verdict on the first operation not completed by every rank that dumped.
int Judge(const std::map<int, RankDump>& by_rank, int nranks) {
  unsigned long long seq = ~0ULL;
  for (const auto& [r, d] : by_rank) seq = std::min(seq, d.first_open ? d.first_open : d.done_max + 1);
  std::set<int> missing, behind, inside;
  std::map<std::string, std::set<int>> calls;  // "allreduce ring" -> ranks that entered seq
  for (int r = 0; r < nranks; ++r) {
    auto it = by_rank.find(r);
    if (it == by_rank.end()) { missing.insert(r); continue; }
    const Op* op = Find(it->second, seq);
    if (op == nullptr && it->second.done_max < seq) { behind.insert(r); continue; }
    inside.insert(r);
    if (op != nullptr) calls[op->call + " " + op->algorithm].insert(r);
  }
  printf("weft-trace: %d ranks, dumps from %zu%s\n", nranks, by_rank.size(),
         missing.empty() ? "" : (" (none from rank(s) " + List(missing) + ")").c_str());
  std::string what = calls.empty() ? "?" : calls.begin()->first;
  if (calls.size() > 1) {
    printf("first divergence: seq=%llu: the ranks entered different calls:\n", seq);
    for (const auto& [call, ranks] : calls) printf("  %s: rank(s) %s\n", call.c_str(), List(ranks).c_str());
    return 0;
  }
  std::set<int> suspects = missing;
  suspects.insert(behind.begin(), behind.end());
  if (suspects.empty()) {
    printf("every rank entered seq=%llu (%s) and none completed it: no rank is behind "
           "(the call failed everywhere: see each dump's reason)\n", seq, what.c_str());
    return 0;
  }
  // A rank that could not dump (stopped, killed) is the likelier cause than one that dumped.
  const int first = missing.empty() ? *behind.begin() : *missing.begin();
  suspects.erase(first);
  printf("first stop: rank %d at seq=%llu (%s): %s\n", first, seq, what.c_str(),
         missing.count(first) ? "it left no dump (stopped, hung or killed)"
                              : "it never entered this operation");
  if (!inside.empty()) printf("  rank(s) %s entered seq=%llu and waited\n", List(inside).c_str(), seq);
  if (!suspects.empty()) printf("  also not in it: rank(s) %s\n", List(suspects).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: weft-trace DUMP... (flight-recorder dumps, WEFT_DEBUG_FILE's files or logs)\n");
    return 2;
  }
  std::vector<RankDump> dumps;
  for (int i = 1; i < argc; ++i)
    if (!ParseFile(argv[i], &dumps)) {
      fprintf(stderr, "weft-trace: cannot read %s\n", argv[i]);
      return 2;
    }
  std::map<int, RankDump> by_rank;  // a rank's last dump wins (a later failure's is newer)
  int nranks = 0;
  for (RankDump& d : dumps) {
    Summarize(&d);
    nranks = std::max(nranks, d.nranks);
    by_rank[d.rank] = d;
  }
  if (by_rank.empty()) {
    fprintf(stderr, "weft-trace: no flight-recorder dump in the given files\n");
    return 2;
  }
  return Judge(by_rank, nranks);
}
