#include "transports/ipc/ipc_options.h"

#include "common/settings.h"

namespace weft::ipc {

StatusOr<IpcOptions> IpcOptionsFromEnv() {
  IpcOptions o;
  WEFT_ASSIGN_OR_RETURN(o.enabled, SettingFlag("WEFT_IPC", o.enabled));
  WEFT_ASSIGN_OR_RETURN(o.window_bytes, SettingBytes("WEFT_IPC_WINDOW_BYTES", o.window_bytes));
  return o;
}

}  // namespace weft::ipc
