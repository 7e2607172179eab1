#include "server/http_service.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace probekit::server {

namespace {

using Clock = Connection::Clock;

// The connection whose request this worker thread answers (client_gone).
thread_local const Connection* answering = nullptr;

// Sets `answering` for one request and clears it however the request ends.
class AnsweringScope {
 public:
  explicit AnsweringScope(const Connection& connection) { answering = &connection; }
  ~AnsweringScope() { answering = nullptr; }
  AnsweringScope(const AnsweringScope&) = delete;
  AnsweringScope& operator=(const AnsweringScope&) = delete;
};

// A worker's view of one request: reads come from the plain form the intake made, writes go to the socket and
// give up when the client takes no bytes for the write timeout, or a second after the server began to stop.
// httplib's Stream changed over its versions (Debian's 0.11 has is_writable; 0.19 added duration, 0.20 replaced
// is_writable by wait_readable and wait_writable): those members are declared without `override`, so each
// version finds the ones it has.
class RequestStream : public httplib::Stream {
 public:
  RequestStream(const Connection& connection, const std::atomic<bool>& stopping, std::chrono::milliseconds timeout)
      : connection_(connection), stopping_(stopping), timeout_(timeout), started_(Clock::now()) {}

  bool is_readable() const override { return read_at_ < connection_.request.size(); }
  bool is_writable() const { return !stopping_; }
  bool wait_readable() const { return is_readable(); }
  bool wait_writable() const { return !stopping_; }
  time_t duration() const {
    return static_cast<time_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, connection_.request.size() - read_at_);
    std::memcpy(ptr, connection_.request.data() + read_at_, n);
    read_at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    Clock::time_point give_up = Clock::now() + timeout_;
    bool stop_seen = false;
    while (true) {
      ssize_t n = ::send(connection_.fd, ptr, size, kSendFlags);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      if (stopping_ && !stop_seen) {
        stop_seen = true;
        give_up = std::min(give_up, Clock::now() + std::chrono::seconds(1));
      }
      if (Clock::now() >= give_up) return -1;
      pollfd ready{connection_.fd, POLLOUT, 0};
      ::poll(&ready, 1, 100);
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = connection_.remote_ip;
    port = connection_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = connection_.local_ip;
    port = connection_.local_port;
  }
  socket_t socket() const override { return connection_.fd; }

 private:
  const Connection& connection_;
  const std::atomic<bool>& stopping_;
  std::chrono::milliseconds timeout_;
  Clock::time_point started_;
  size_t read_at_ = 0;
};

void address_of(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

std::string bind_failure(const std::string& host, int port, int error) {
  switch (error) {
    case EADDRINUSE:
      return fmt::format("port {} is in use: another program (another probe_server?) listens on it; stop it or choose "
                         "another --port",
                         port);
    case EADDRNOTAVAIL: return fmt::format("{} is not an address of this machine (--host)", host);
    case EACCES: return fmt::format("port {} needs privileges this process lacks; choose another --port", port);
    default: return std::strerror(error);
  }
}

// A listening socket on the first of `host`'s addresses that takes it; -1 with `error` set when none does.
int listen_socket(const addrinfo* addresses, int& error) {
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    // Non-blocking: a client gone between poll and accept leaves accept nothing to wait for.
    set_descriptor_flags(fd, true);
    // SO_REUSEADDR lets a restarted server listen while its old connections linger in TIME_WAIT. SO_REUSEPORT is
    // not set: with it a second server would share the port and silently take half of the new connections.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    error = errno;
    ::close(fd);
  }
  return -1;
}

}  // namespace

bool client_gone() {
  if (answering == nullptr) return false;
  char byte = 0;
  ssize_t n = ::recv(answering->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // the client's next request, pipelined
  if (n == 0) return true;  // it closed its side
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
}

HttpService::HttpService(ServiceOptions options) : options_(std::move(options)) {
  // What httplib's Keep-Alive header tells clients: the intake closes a connection idle for --client-timeout and
  // answers any number of requests on one (regression: it advertised httplib's own "timeout=5, max=5").
  set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(options_.intake.client_timeout).count());
  set_keep_alive_max_count(std::numeric_limits<int>::max());
}

HttpService::~HttpService() {
  stop();
  if (listener_ >= 0) ::close(listener_);
}

int HttpService::listen_on(const std::string& host, int port) {
  std::string bare = host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  if (int rc = ::getaddrinfo(bare.c_str(), std::to_string(port).c_str(), &hints, &addresses); rc != 0) {
    fail("cannot listen on {} port {}: {} is not an address of this machine (--host): {}", host, port, host,
         ::gai_strerror(rc));
  }
  int error = 0;
  listener_ = listen_socket(addresses, error);
  ::freeaddrinfo(addresses);
  if (listener_ < 0) fail("cannot listen on {} port {}: {}", host, port, bind_failure(host, port, error));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &length);
  std::string ip;
  address_of(bound, ip, port);
  svr_sock_ = listener_;  // httplib's streamed responses run while this is set
  return port;
}

void HttpService::serve() {
  if (listener_ < 0) fail("probe_server: serve() before listen_on()");
  intake_ = std::make_unique<ConnectionIntake>(options_.intake,
                                               [this](std::unique_ptr<Connection> c) { dispatch(std::move(c)); });
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { work(); });
  accept_loop();
  intake_->stop();
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  std::deque<std::unique_ptr<Connection>> unanswered;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unanswered.swap(ready_);
  }
  unanswered.clear();
  intake_.reset();
}

void HttpService::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_.exchange(true)) return;
  }
  svr_sock_ = INVALID_SOCKET;  // streamed responses end at their next chunk
  if (listener_ >= 0) ::shutdown(listener_, SHUT_RDWR);
  room_.notify_all();
  work_ready_.notify_all();
}

void HttpService::accept_loop() {
  while (!stopping_) {
    pollfd incoming{listener_, POLLIN, 0};
    if (::poll(&incoming, 1, 200) <= 0 || (incoming.revents & POLLIN) == 0) continue;
    if (!wait_for_room()) return;
    int fd = ::accept(listener_, nullptr, nullptr);
    if (fd >= 0) {
      set_descriptor_flags(fd, true);
      admit(fd);
    } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // Out of descriptors: the client waits in the queue until a connection closes.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// Waits while --max-connections are open; false once stopping.
bool HttpService::wait_for_room() {
  std::unique_lock<std::mutex> lock(mutex_);
  room_.wait(lock, [this] { return stopping_ || open_ < options_.max_connections; });
  return !stopping_;
}

void HttpService::admit(int fd) {
  // Answers are small writes: without TCP_NODELAY, Nagle's algorithm meets the client's delayed ACK and adds
  // about 40 ms to a request on a kept-alive connection.
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  ++open_;
  auto connection = std::make_unique<Connection>(fd, [this] { closed(); });
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    address_of(address, connection->remote_ip, connection->remote_port);
  }
  length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    address_of(address, connection->local_ip, connection->local_port);
  }
  intake_->add(std::move(connection));
}

void HttpService::closed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;
  }
  room_.notify_one();
}

void HttpService::dispatch(std::unique_ptr<Connection> connection) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) ready_.push_back(std::move(connection));
  }
  connection.reset();  // when stopping: closed here, outside the lock
  work_ready_.notify_one();
}

void HttpService::work() {
  while (true) {
    std::unique_ptr<Connection> connection;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      connection = std::move(ready_.front());
      ready_.pop_front();
    }
    answer(std::move(connection));
  }
}

void HttpService::answer(std::unique_ptr<Connection> connection) {
  RequestStream stream(*connection, stopping_, options_.intake.client_timeout);
  bool closed_by_client = false;
  bool written = false;
  try {
    AnsweringScope scope(*connection);
    written = process(*this, stream, *connection, connection->close_after || stopping_, closed_by_client, 0);
  } catch (const std::exception& e) {
    spdlog::error("probe_server: {}", e.what());
  }
  if (!written || closed_by_client || stopping_) return;
  if (connection->close_after) {
    intake_->linger(std::move(connection));
  } else {
    intake_->add(std::move(connection));
  }
}

}  // namespace probekit::server
