// Running a piece of a test in a forked child: for code that may hang (an alarm kills it), must
// run as another user (root's chmod 000 stops nothing), or sets process-wide limits.
#pragma once

#include <grp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <csignal>
#include <functional>
#include <string>

namespace combiner::testing {

// The text `body` returns in a forked child that SIGALRM kills after `seconds`; "TIMEOUT" if
// it did, "CHILD DIED: <what it wrote>" if the child ended any other abnormal way.
inline std::string text_from_child(const std::function<std::string()>& body, unsigned seconds) {
  int fds[2];
  if (::pipe(fds) != 0) return "SKIP: pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(seconds);
    const std::string out = body();
    const ssize_t written = ::write(fds[1], out.data(), out.size());
    ::_exit(written == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) return "TIMEOUT";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : "CHILD DIED: " + out;
}

// In a child: become uid and gid 65534 so that file permissions apply to it. "" when done,
// "SKIP: ..." (naming `purpose`) when it cannot.
inline std::string drop_root(const std::string& purpose) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
    return "SKIP: running as root and cannot drop to uid 65534 to " + purpose;
  return "";
}

// The message of the exception `call` throws in a forked child (one LibTorch thread: the
// parent's pool does not survive fork) after `prepare`, which returns "" to go on or
// "SKIP: why"; "NO ERROR" if it throws nothing, "WRONG TYPE: ..." if not a runtime_error.
inline std::string message_in_child(const std::function<std::string()>& prepare,
                                    const std::function<void()>& call,
                                    unsigned seconds = 120) {
  return text_from_child(
      [&]() -> std::string {
        at::set_num_threads(1);
        const std::string skip = prepare();
        if (!skip.empty()) return skip;
        try {
          call();
        } catch (const std::runtime_error& e) {
          return e.what();
        } catch (const std::exception& e) {
          return std::string("WRONG TYPE: ") + e.what();
        }
        return "NO ERROR";
      },
      seconds);
}

// For message_in_child: the child may write files of at most `bytes` bytes; past that write()
// fails with EFBIG (SIGXFSZ ignored), as on a full disk.
inline std::function<std::string()> file_size_limit(rlim_t bytes) {
  return [bytes]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{bytes, bytes};
    return ::setrlimit(RLIMIT_FSIZE, &limit) == 0 ? "" : "SKIP: setrlimit failed";
  };
}

// For message_in_child: the child runs as uid 65534 when this process is root, so that the
// permissions of the read-only `folder` apply.
inline std::function<std::string()> unprivileged(const std::string& folder) {
  return [folder]() -> std::string {
    if (::geteuid() == 0) {
      const std::string skip = drop_root("make the folder read-only");
      if (!skip.empty()) return skip;
    }
    if (::access(folder.c_str(), W_OK) == 0) return "SKIP: '" + folder + "' is still writable";
    return "";
  };
}

}  // namespace combiner::testing
