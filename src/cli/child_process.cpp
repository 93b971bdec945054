#include "cli/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "fp8lm/error.h"

extern char** environ;

namespace fp8lm::cli {
namespace {

// The children running, 0 in a free slot: what the signal handler passes a stop on to.
std::array<std::atomic<pid_t>, kMaxChildRuns> g_children{};
std::atomic<int> g_stop{0};

extern "C" void forward_stop(int sig) {
  g_stop = sig;
  for (const std::atomic<pid_t>& slot : g_children) {
    const pid_t child = slot.load();
    if (child > 0) ::kill(child, sig);
  }
}

// A free slot held (-1, which the handler passes over) for a child about to start.
std::atomic<pid_t>& reserve_slot() {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t free = 0;
    if (slot.compare_exchange_strong(free, -1)) return slot;
  }
  throw Error(fmt::format("more than {} runs at once", kMaxChildRuns));
}

void untrack(pid_t pid) {
  for (std::atomic<pid_t>& slot : g_children) {
    pid_t ours = pid;
    if (slot.compare_exchange_strong(ours, 0)) return;
  }
}

int exit_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The environment without an MPI launcher's variables (Open MPI's, PMIx's, MPICH's), so that
// the child does not take itself for a rank.
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.starts_with("OMPI_") || v.starts_with("PMIX_") || v.starts_with("PMI_") ||
        v.starts_with("MPI_LOCALRANKID") || v.starts_with("HYDRA_"))
      continue;
    env.push_back(v);
  }
  return env;
}

}  // namespace

StopForwarding::StopForwarding() {
  g_stop = 0;
  struct sigaction stop {};
  stop.sa_handler = forward_stop;
  sigemptyset(&stop.sa_mask);
  ::sigaction(SIGINT, &stop, nullptr);
  ::sigaction(SIGTERM, &stop, nullptr);
}

StopForwarding::~StopForwarding() {
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
}

int StopForwarding::signal() const {
  return g_stop.load();
}

pid_t start_fp8lm(const std::vector<std::string>& args, const std::string& log_path) {
  std::atomic<pid_t>& slot = reserve_slot();
  const int log = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log < 0) {
    slot = 0;
    throw Error(fmt::format("{}: cannot open: {}", log_path, std::strerror(errno)));
  }
  // Everything exec needs, built before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> argv_text = {"fp8lm"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = child_environment();
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    slot = 0;
    throw Error(fmt::format("cannot start a run: {}", std::strerror(err)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the parent died before prctl
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    const char msg[] = "error: cannot run /proc/self/exe\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log);
  slot = pid;
  if (g_stop.load() != 0) ::kill(pid, g_stop.load());  // a stop that came just before
  return pid;
}

EndedRun wait_for_run(const std::vector<pid_t>& running) {
  if (running.empty()) throw Error("wait_for_run: no run is running");
  // Whether child i ended (its status in status); Error where it is no child of ours.
  int status = 0;
  const auto ended = [&](size_t i, int options) {
    pid_t got;
    while ((got = ::waitpid(running[i], &status, options)) < 0 && errno == EINTR) {
    }
    if (got < 0) throw Error(fmt::format("run {}: {}", running[i], std::strerror(errno)));
    if (got == 0) return false;
    untrack(running[i]);
    return true;
  };
  if (running.size() == 1) {  // blocked on: no poll's delay added to each run of --jobs 1
    ended(0, 0);
    return {0, exit_status(status)};
  }
  // Each child of ours asked in turn, never waitpid(-1): a library in this process (an MPI
  // launcher's) may have children of its own to reap. A run lasts seconds to hours, so a look
  // every 10 ms costs nothing.
  for (;;) {
    for (size_t i = 0; i < running.size(); ++i)
      if (ended(i, WNOHANG)) return {i, exit_status(status)};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace fp8lm::cli
