#include "transports/ucx/ucx_options.h"

#include "common/settings.h"

namespace weft {

UcxOptions UcxOptionsFromEnv() {
  UcxOptions o;
  // A bad value keeps the default here: ValidateSettings fails communicator creation on it.
  StatusOr<std::string> mode = SettingChoice("WEFT_UCX_ERR_MODE", "auto");
  if (mode.ok() && *mode == "peer") o.err_mode = UcxOptions::ErrMode::kRequire;
  if (std::string tls = SettingText("WEFT_UCX_TLS"); !tls.empty()) o.tls = tls;
  o.spin_us = static_cast<int>(SettingIntOr("WEFT_UCX_SPIN_US", o.spin_us));
  return o;
}

}  // namespace weft
