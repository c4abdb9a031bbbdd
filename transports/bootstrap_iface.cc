// TransportBootstrap's default blob allgather (see bootstrap_iface.h).
#include "transports/bootstrap_iface.h"

#include <algorithm>
#include <cstdint>

namespace weft {

Status TransportBootstrap::AllGatherBlobs(const std::string& mine, std::vector<std::string>* all) {
  const int n = nranks();
  uint64_t len = mine.size();
  std::vector<uint64_t> lens(n);
  WEFT_RETURN_IF_ERROR_CTX(AllGather(&len, sizeof(len), lens.data()), "allgather of blob sizes");
  uint64_t max_len = *std::max_element(lens.begin(), lens.end());
  std::string padded = mine;
  padded.resize(max_len, '\0');
  std::string gathered(max_len * n, '\0');
  if (max_len > 0) {
    WEFT_RETURN_IF_ERROR_CTX(AllGather(padded.data(), max_len, &gathered[0]), "allgather of blobs");
  }
  all->assign(n, std::string());
  for (int r = 0; r < n; ++r) (*all)[r] = gathered.substr(r * max_len, lens[r]);
  return OkStatus();
}

}  // namespace weft
