// What the CUPTI adapter is started with (engine_launches.h's prepare_launches), in a header of its own: both halves of
// the adapter hold it, the launching thread's (job_thread/launch_callbacks.cc, through engine_launches_detail.h) and
// the engine's (engine_launches.cc), and neither half's header may include the other's.
#pragma once

#include <string>

#include "base/flight_record_format.h"
#include "shim/config.h"

namespace trainscope::launches {
class LaunchWatcher;
}

namespace trainscope::engine {

struct LaunchesSetup {
  const Config* config = nullptr;
  recorder::FileHeader* recorder = nullptr;  // the live flight recorder (nullptr: nothing is recorded, no collector)
  std::string run_dir;
  std::string recorder_path;
  launches::LaunchWatcher* watcher = nullptr;  // watched kernels' frames (TRAINSCOPE_WATCH=kernels:REGEX); may be null
};

}  // namespace trainscope::engine
