// Several processes from one test: a free loopback port, and
// a child started with extra environment variables that the test can signal, wait for with a
// deadline, and that is killed if the test ends first.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/run_binary.h"
#include "free_port.h"

extern char** environ;

namespace combiner::testing {

class ChildProcess {
 public:
  // argv[0] is a path; `env` is added to (or overrides) this process's environment; stdout and
  // stderr go to `log_path`.
  ChildProcess(const std::vector<std::string>& argv,
               const std::vector<std::pair<std::string, std::string>>& env,
               const std::string& log_path) {
    // Everything the child needs is built before fork: after it only exec-safe calls.
    std::vector<std::string> entries;
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      bool overridden = false;
      for (const auto& [name, value] : env) overridden |= entry.rfind(name + "=", 0) == 0;
      if (!overridden) entries.push_back(entry);
    }
    for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
    std::vector<char*> envp, args;
    for (auto& e : entries) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& a : argv_copy) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void signal(int number) const { kill(pid_, number); }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }

  // The exit status (-1 for a signal), or nullopt if it still runs after `seconds`.
  std::optional<int> wait_for(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!status_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace combiner::testing
