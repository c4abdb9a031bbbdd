// reference_file.h: reads the PyTorch twin's golden files: "moe-golden 1", then "config KEY
// VALUE" lines, then "tensor NAME NDIM D0 D1 ..." lines each followed by the tensor's float32
// little-endian bytes, then "end".
#ifndef MOE_TRAINER_REFERENCE_FILE_H_
#define MOE_TRAINER_REFERENCE_FILE_H_

#include <map>
#include <string>
#include <vector>

#include "config.h"
#include "status.h"

namespace moe {

struct ReferenceTensor {
  std::vector<int> shape;
  std::vector<float> data;
};

struct ReferenceFile {
  std::map<std::string, std::string> config;
  std::map<std::string, ReferenceTensor> tensors;
  Status Load(const std::string& path);
  // The TrainConfig the twin used (single rank).
  Status ToTrainConfig(TrainConfig* out) const;
  const ReferenceTensor* Find(const std::string& name) const;
};

}  // namespace moe

#endif  // MOE_TRAINER_REFERENCE_FILE_H_
