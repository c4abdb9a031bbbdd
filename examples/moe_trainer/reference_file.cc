// reference_file.cc: parsing the golden file written by twin.py.
#include "reference_file.h"

#include <fstream>
#include <sstream>

namespace moe {

Status ReferenceFile::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open reference file " + path);
  std::string line;
  if (!std::getline(in, line) || line != "moe-golden 1")
    return Status::Error(path + ": not a moe-golden 1 file");
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    if (kind == "end") return Status();
    if (kind == "config") {
      std::string value;
      words >> value;
      config[name] = value;
    } else if (kind == "tensor") {
      ReferenceTensor t;
      int ndim = 0;
      words >> ndim;
      size_t count = 1;
      for (int i = 0; i < ndim; ++i) {
        int d = 0;
        words >> d;
        t.shape.push_back(d);
        count *= d;
      }
      t.data.resize(count);
      if (!in.read(reinterpret_cast<char*>(t.data.data()), count * sizeof(float)))
        return Status::Error(path + ": truncated tensor " + name);
      tensors[name] = std::move(t);
    } else {
      return Status::Error(path + ": unexpected line '" + line + "'");
    }
  }
  return Status::Error(path + ": missing 'end'");
}

const ReferenceTensor* ReferenceFile::Find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Status ReferenceFile::ToTrainConfig(TrainConfig* out) const {
  TrainConfig c;
  auto get = [&](const char* key, double* v) -> Status {
    auto it = config.find(key);
    if (it == config.end()) return Status::Error(std::string("reference config lacks ") + key);
    *v = std::stod(it->second);
    return Status();
  };
  struct IntKey { const char* key; int* field; };
  ModelConfig& m = c.model;
  for (IntKey k : {IntKey{"vocab", &m.vocab}, {"dim", &m.dim}, {"layers", &m.layers},
                   {"heads", &m.heads}, {"seq_len", &m.seq_len}, {"experts", &m.experts},
                   {"top_k", &m.top_k}, {"expert_hidden", &m.expert_hidden},
                   {"shared_experts", &m.shared_experts}, {"batch", &c.batch},
                   {"steps", &c.steps}, {"warmup", &c.warmup}}) {
    double v = 0;
    MOE_RETURN_IF_ERROR(get(k.key, &v));
    *k.field = static_cast<int>(v);
  }
  struct FloatKey { const char* key; float* field; };
  for (FloatKey k : {FloatKey{"capacity_factor", &m.capacity_factor}, {"aux_loss", &m.aux_loss_coeff},
                     {"z_loss", &m.z_loss_coeff}, {"bias_gamma", &m.bias_gamma},
                     {"rope_base", &m.rope_base}, {"norm_eps", &m.norm_eps}, {"lr", &c.lr},
                     {"min_lr_ratio", &c.min_lr_ratio}, {"weight_decay", &c.weight_decay},
                     {"grad_clip", &c.grad_clip}, {"beta1", &c.beta1}, {"beta2", &c.beta2},
                     {"eps", &c.adam_eps}}) {
    double v = 0;
    MOE_RETURN_IF_ERROR(get(k.key, &v));
    *k.field = static_cast<float>(v);
  }
  auto seed = config.find("seed");  // replayed runs: moe_train's seed (weights and batches)
  if (seed != config.end()) c.seed = std::stoull(seed->second);
  auto router = config.find("router");
  if (router == config.end()) return Status::Error("reference config lacks router");
  m.router = router->second == "sigmoid" ? RouterKind::kSigmoid : RouterKind::kSoftmax;
  *out = c;
  return Status();
}

}  // namespace moe
