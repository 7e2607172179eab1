#include "server/connection_intake.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace probekit::server {

namespace {

using Clock = Connection::Clock;

constexpr size_t kReadBytes = 64 * 1024;
// How long a refused client may go on sending before the connection closes under it, and how much it may send.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr size_t kMostDrained = size_t{64} << 20;

// The socket's buffer takes a small response whole; what does not fit is lost with the connection.
void send_best_effort(int fd, const std::string& bytes) { ::send(fd, bytes.data(), bytes.size(), kSendFlags); }

}  // namespace

// The scheme's name is case-insensitive (RFC 9110 11.1); the key is compared in constant time.
bool bearer_matches(const std::string& authorization, const std::string& key) {
  const std::string scheme = "bearer ";
  if (key.empty() || authorization.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  }
  const std::string given = authorization.substr(scheme.size());
  unsigned char difference = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    difference |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  }
  return difference == 0;
}

bool needs_api_key(const std::string& path) { return path != "/" && path != "/healthz"; }

ConnectionIntake::ConnectionIntake(IntakeOptions options, std::function<void(std::unique_ptr<Connection>)> dispatch)
    : options_(std::move(options)), dispatch_(std::move(dispatch)) {
  if (::pipe(wake_) != 0) fail("probe_server: cannot make a pipe: {}", std::strerror(errno));
  set_descriptor_flags(wake_[0], true);
  set_descriptor_flags(wake_[1], true);
  thread_ = std::thread([this] { run(); });
}

ConnectionIntake::~ConnectionIntake() {
  stop();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void ConnectionIntake::add(std::unique_ptr<Connection> connection) {
  connection->framer = std::make_unique<RequestFramer>(options_.framing);
  connection->deadline = Clock::now() + options_.client_timeout;
  connection->sent_continue = connection->close_after = connection->draining = false;
  connection->request.clear();
  hand_over(std::move(connection));
}

void ConnectionIntake::linger(std::unique_ptr<Connection> connection) {
  ::shutdown(connection->fd, SHUT_WR);
  connection->draining = true;
  connection->received.clear();
  connection->deadline = Clock::now() + kLinger;
  hand_over(std::move(connection));
}

void ConnectionIntake::hand_over(std::unique_ptr<Connection> connection) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) arrivals_.push_back(std::move(connection));
  }
  connection.reset();  // closed here when stopping, outside the lock
  char byte = 1;
  (void)!::write(wake_[1], &byte, 1);
}

void ConnectionIntake::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  char byte = 1;
  (void)!::write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
}

void ConnectionIntake::run() {
  std::vector<pollfd> fds;
  while (take_arrivals()) {
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    for (const auto& connection : held_) fds.push_back(pollfd{connection->fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), wait_ms(Clock::now()));
    char sink[64];
    while (::read(wake_[0], sink, sizeof sink) > 0) {
    }
    const Clock::time_point now = Clock::now();
    std::vector<std::unique_ptr<Connection>> kept;
    for (size_t i = 0; i < held_.size(); ++i) {
      std::unique_ptr<Connection>& connection = held_[i];
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        if (!read_from(*connection)) continue;
        frame(connection);
      }
      if (connection && !expired(*connection, now)) kept.push_back(std::move(connection));
    }
    held_ = std::move(kept);
  }
  held_.clear();
}

// Moves the connections handed over into the polled set, framing what they already hold (a kept-alive client
// may have sent its next request already); false once stopping, with everything closed.
bool ConnectionIntake::take_arrivals() {
  std::vector<std::unique_ptr<Connection>> arrived;
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    arrived.swap(arrivals_);
    stopping = stopping_;
  }
  if (stopping) return false;
  for (std::unique_ptr<Connection>& connection : arrived) {
    if (!connection->received.empty()) frame(connection);
    if (connection) held_.push_back(std::move(connection));
  }
  return true;
}

// False when the connection is to close: the client closed it, it failed, or a refused client sends on and on.
bool ConnectionIntake::read_from(Connection& connection) {
  char buffer[kReadBytes];
  ssize_t n = ::recv(connection.fd, buffer, sizeof buffer, 0);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) return false;
  if (connection.draining) {
    connection.drained += static_cast<size_t>(n);
    return connection.drained < kMostDrained;
  }
  connection.received.append(buffer, static_cast<size_t>(n));
  return true;
}

// Reads on in what the connection holds: a whole request (or one refused on its headers) goes to a worker and
// leaves `connection` empty; a refused one is answered here and drained.
void ConnectionIntake::frame(std::unique_ptr<Connection>& connection) {
  if (connection->draining) return;
  RequestFramer& framer = *connection->framer;
  RequestFramer::State state = framer.advance(connection->received);
  const std::string path = framer.target().substr(0, framer.target().find('?'));
  if (framer.headers_complete() && !options_.api_key.empty() && needs_api_key(path) &&
      !bearer_matches(framer.header("Authorization"), options_.api_key)) {
    // The handlers' 401, with nothing of the body waited for.
    connection->request = framer.headers_only();
    connection->close_after = true;
    dispatch_(std::move(connection));
  } else if (state == RequestFramer::State::kRefused) {
    refuse(*connection, framer.status(), framer.message());
  } else if (state == RequestFramer::State::kComplete) {
    connection->request = framer.request();
    connection->received.erase(0, framer.consumed());
    dispatch_(std::move(connection));
  } else if (framer.waits_for_continue() && !connection->sent_continue) {
    send_best_effort(connection->fd, "HTTP/1.1 100 Continue\r\n\r\n");
    connection->sent_continue = true;
  }
}

std::string ConnectionIntake::refusal(const Connection& connection, int status, const std::string& message) const {
  if (!options_.refusal) return error_response(status, message);
  const std::string& target = connection.framer->target();
  return options_.refusal(status, message, target.substr(0, target.find('?')));
}

void ConnectionIntake::refuse(Connection& connection, int status, const std::string& message) {
  send_best_effort(connection.fd, refusal(connection, status, message));
  ::shutdown(connection.fd, SHUT_WR);
  connection.draining = true;
  connection.received.clear();
  connection.deadline = Clock::now() + kLinger;
}

// True when the connection's time is up: a request begun is answered 408 first, an idle connection just closes.
bool ConnectionIntake::expired(Connection& connection, Clock::time_point now) {
  if (now < connection.deadline) return false;
  if (!connection.draining && !connection.received.empty()) {
    auto seconds = std::chrono::duration<double>(options_.client_timeout).count();
    send_best_effort(connection.fd,
                     refusal(connection, 408, fmt::format("the request did not arrive whole within this server's time limit "
                                                          "of {:g} s for a request's headers and body (--client-timeout)",
                                                          seconds)));
  }
  return true;
}

int ConnectionIntake::wait_ms(Clock::time_point now) const {
  Clock::time_point first = now + std::chrono::seconds(1);
  for (const auto& connection : held_) first = std::min(first, connection->deadline);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(first - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
}

}  // namespace probekit::server
