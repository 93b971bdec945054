#pragma once
// One fp8lm command run as a child process, its output appended to a log file: how `compare`
// runs each training run as the ordinary `train` a user would have typed. A stop asked of this
// process (SIGINT, SIGTERM) is passed on to the child, which checkpoints and exits; a child
// whose parent dies is sent SIGTERM, so nothing trains on unseen.
#include <string>
#include <vector>

namespace fp8lm::cli {

// While one lives, SIGINT and SIGTERM do not end this process: they are noted, and passed on
// to the child run_fp8lm is waiting for (which checkpoints and exits).
class StopForwarding {
 public:
  StopForwarding();
  ~StopForwarding();
  StopForwarding(const StopForwarding&) = delete;
  StopForwarding& operator=(const StopForwarding&) = delete;
  int signal() const;  // the stop signal received so far (0: none)
};

// Runs this program (/proc/self/exe) with args, stdout and stderr appended to log_path, and
// waits for it; its exit status, or 128 + the signal that ended it. Called under a
// StopForwarding. The child sees no MPI launcher's variables: it is a process of its own, not a
// rank of the launch its parent belongs to. Error when it cannot be started.
int run_fp8lm(const std::vector<std::string>& args, const std::string& log_path);

}  // namespace fp8lm::cli
