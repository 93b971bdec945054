#include "cli/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "fp8lm/error.h"

extern char** environ;

namespace fp8lm::cli {
namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop{0};

extern "C" void forward_stop(int sig) {
  g_stop = sig;
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
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

int run_fp8lm(const std::vector<std::string>& args, const std::string& log_path) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log < 0) throw Error(fmt::format("{}: cannot open: {}", log_path, std::strerror(errno)));
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
  g_child = pid;
  if (g_stop.load() != 0) ::kill(pid, g_stop.load());  // a stop that came just before
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace fp8lm::cli
