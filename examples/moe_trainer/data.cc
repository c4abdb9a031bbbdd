// data.cc: reading and splitting the fortunes, and drawing batches.
#include "data.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "rng.h"

namespace moe {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Collection files: regular files that are not the strfile indexes (.dat) or UTF-8 links (.u8).
Status ListCollections(const std::string& dir, std::vector<std::string>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr)
    return Status::Error("--data " + dir + ": cannot open the fortunes directory (install the "
                         "Debian package 'fortunes')");
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name[0] == '.' || EndsWith(name, ".dat") || EndsWith(name, ".u8")) continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files->push_back(path);
  }
  closedir(d);
  std::sort(files->begin(), files->end());
  if (files->empty()) return Status::Error("--data " + dir + ": no fortune collections found");
  return Status();
}

}  // namespace

Status FortunesData::Load(const std::string& dir) {
  std::vector<std::string> files;
  MOE_RETURN_IF_ERROR(ListCollections(dir, &files));
  train_.clear(), val_.clear(), fortunes_ = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::Error("cannot read " + path);
    std::string line, fortune;
    auto finish = [&] {  // fortunes are separated by lines holding only "%"
      if (fortune.empty()) return;
      std::string& out = fortunes_ % 20 == 0 ? val_ : train_;
      out += fortune;
      out += "%\n";
      ++fortunes_;
      fortune.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%") finish();
      else fortune += line + "\n";
    }
    finish();
  }
  if (train_.size() < 4096 || val_.size() < 1024)
    return Status::Error("--data " + dir + ": too little text (" + std::to_string(train_.size()) +
                         " training bytes)");
  return Status();
}

void FortunesData::Sample(const std::string& text, uint64_t seed, uint64_t stream, uint64_t first,
                          int seq_len, int first_sequence, int local, Batch* batch) const {
  batch->sequences = local;
  batch->inputs.resize(static_cast<size_t>(local) * seq_len);
  batch->targets.resize(batch->inputs.size());
  const size_t positions = text.size() - seq_len - 1;
  for (int i = 0; i < local; ++i) {
    const uint64_t index = first + static_cast<uint64_t>(first_sequence) + i;
    const size_t start = static_cast<size_t>(UniformOpen(seed, stream, index) * positions);
    for (int t = 0; t < seq_len; ++t) {
      batch->inputs[i * seq_len + t] = static_cast<unsigned char>(text[start + t]);
      batch->targets[i * seq_len + t] = static_cast<unsigned char>(text[start + t + 1]);
    }
  }
}

void FortunesData::TrainBatch(uint64_t seed, int step, int global_batch, int seq_len, int rank,
                              int ranks, Batch* batch) const {
  const int local = global_batch / ranks;
  TrainSequences(seed, step, global_batch, seq_len, rank * local, local, batch);
}

void FortunesData::TrainSequences(uint64_t seed, int step, int global_batch, int seq_len,
                                  int first, int count, Batch* batch) const {
  Sample(train_, seed, HashString("train"), static_cast<uint64_t>(step) * global_batch, seq_len,
         first, count, batch);
}

void FortunesData::ValBatch(uint64_t seed, int index, int global_batch, int seq_len, int rank,
                            int ranks, Batch* batch) const {
  // An uneven batch (--elastic after a lost rank) gives the first global_batch % ranks ranks
  // one sequence more, as the balancer does for training batches.
  const int local = global_batch / ranks, extra = global_batch % ranks;
  Sample(val_, seed, HashString("val"), static_cast<uint64_t>(index) * global_batch, seq_len,
         rank * local + std::min(rank, extra), local + (rank < extra ? 1 : 0), batch);
}

}  // namespace moe
