// ListUcxLanes / UcxHasRdmaLane: what UCX could use on this host, through UCT's component and
// memory-domain queries (what `ucx_info -d` prints), without creating a UCP context. The
// selection rule "ucx by default only where it has an RDMA lane" reads this.
#include <uct/api/uct.h>

#include <cstring>
#include <vector>

#include "transports/ucx/ucx_transport.h"

namespace weft {
namespace {

// Verbs-based UCT transports: InfiniBand and RoCE (reliable/dynamically connected/unreliable
// datagram, generic verbs or mlx5 accelerated) and GPUDirect-capable ones build on them.
bool IsRdmaTransport(const char* tl_name) {
  static const char* const kPrefixes[] = {"rc", "dc", "ud"};
  for (const char* p : kPrefixes) {
    if (strncmp(tl_name, p, 2) == 0 && (tl_name[2] == '_' || tl_name[2] == '\0')) return true;
  }
  return false;
}

// Appends the transports of one memory domain of `component`.
void AddMdLanes(uct_component_h component, const char* md_name, std::vector<UcxLane>* out) {
  uct_md_config_t* config = nullptr;
  if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) return;
  uct_md_h md = nullptr;
  ucs_status_t s = uct_md_open(component, md_name, config, &md);
  uct_config_release(config);
  if (s != UCS_OK) return;
  uct_tl_resource_desc_t* resources = nullptr;
  unsigned count = 0;
  if (uct_md_query_tl_resources(md, &resources, &count) == UCS_OK) {
    for (unsigned i = 0; i < count; ++i) {
      UcxLane lane;
      lane.transport = resources[i].tl_name;
      lane.device = resources[i].dev_name;
      lane.rdma = IsRdmaTransport(resources[i].tl_name);
      out->push_back(lane);
    }
    uct_release_tl_resource_list(resources);
  }
  uct_md_close(md);
}

}  // namespace

StatusOr<std::vector<UcxLane>> ListUcxLanes() {
  uct_component_h* components = nullptr;
  unsigned ncomponents = 0;
  ucs_status_t s = uct_query_components(&components, &ncomponents);
  if (s != UCS_OK) return SystemError(std::string("uct_query_components: ") + ucs_status_string(s));
  std::vector<UcxLane> lanes;
  for (unsigned c = 0; c < ncomponents; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK || attr.md_resource_count == 0) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& md : mds) AddMdLanes(components[c], md.md_name, &lanes);
  }
  uct_release_component_list(components);
  return lanes;
}

bool UcxHasRdmaLane() {
  StatusOr<std::vector<UcxLane>> lanes = ListUcxLanes();
  if (!lanes.ok()) return false;
  for (const UcxLane& l : *lanes)
    if (l.rdma) return true;
  return false;
}

}  // namespace weft
