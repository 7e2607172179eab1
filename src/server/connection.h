// One client connection of probe_server, as the intake (which reads requests) and the workers (which answer them)
// hand it to each other. Whoever drops the last owner closes it.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/api/request_framing.h"

namespace probekit::server {

// send(2) never blocks on a connection; where the system has MSG_NOSIGNAL a closed peer is not a SIGPIPE either (the
// process ignores SIGPIPE anyway, as cpp-httplib's server sets it).
#ifdef MSG_NOSIGNAL
inline constexpr int kSendFlags = MSG_NOSIGNAL | MSG_DONTWAIT;
#else
inline constexpr int kSendFlags = MSG_DONTWAIT;
#endif

/// Marks a descriptor close-on-exec (nothing the process starts inherits it) and, with `nonblocking`, non-blocking;
/// fcntl rather than the flags of accept4 and pipe2, which macOS lacks.
inline void set_descriptor_flags(int fd, bool nonblocking) {
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  if (nonblocking) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/// Whether the client of the request this thread answers has closed its connection (false on a thread that answers
/// none): a handler waiting on the worker lets go of work nobody will read. HttpService::answer says which it is.
bool client_gone();

struct Connection {
  using Clock = std::chrono::steady_clock;

  Connection(int descriptor, std::function<void()> closed) : fd(descriptor), on_close(std::move(closed)) {}
  ~Connection() {
    ::close(fd);
    if (on_close) on_close();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  std::function<void()> on_close;
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;

  // The intake's side: what arrived and is not yet consumed, the request being read, and when time is up.
  std::string received;
  std::unique_ptr<RequestFramer> framer;
  Clock::time_point deadline;
  bool sent_continue = false;
  bool draining = false;  // refused: what still arrives is read and dropped, so that the client reads the refusal
  size_t drained = 0;

  // A worker's side: the request in plain form, and whether the connection ends after its response (a request
  // refused on its headers leaves its body unread).
  std::string request;
  bool close_after = false;
};

}  // namespace probekit::server
