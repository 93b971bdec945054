#pragma once
// fp8lm commands run as child processes, each one's output appended to a log file: how `compare`
// runs each training run as the ordinary `train` a user would have typed, one or several at
// once. A stop asked of this process (SIGINT, SIGTERM) is passed on to every child it runs,
// which checkpoints and exits; a child whose parent dies is sent SIGTERM, so nothing trains on
// unseen.
#include <sys/types.h>

#include <string>
#include <vector>

namespace fp8lm::cli {

// The most children that may run at once.
inline constexpr int kMaxChildRuns = 256;

// While one lives, SIGINT and SIGTERM do not end this process: they are noted, and passed on
// to the children start_fp8lm started (which checkpoint and exit).
class StopForwarding {
 public:
  StopForwarding();
  ~StopForwarding();
  StopForwarding(const StopForwarding&) = delete;
  StopForwarding& operator=(const StopForwarding&) = delete;
  int signal() const;  // the stop signal received so far (0: none)
};

// Starts this program (/proc/self/exe) with args, stdout and stderr appended to log_path, and
// returns at once; wait_for_run reaps it. Called under a StopForwarding, with fewer than
// kMaxChildRuns children running. The child sees no MPI launcher's variables: it is a process of
// its own, not a rank of the launch its parent belongs to. Error when it cannot be started.
pid_t start_fp8lm(const std::vector<std::string>& args, const std::string& log_path);

// Waits until one of `running` (children start_fp8lm started) has ended; its place in `running`
// and its exit status, or 128 + the signal that ended it.
struct EndedRun {
  size_t index;
  int status;
};
EndedRun wait_for_run(const std::vector<pid_t>& running);

}  // namespace fp8lm::cli
