// probe_server's HTTP layer: cpp-httplib routes and answers requests (its handlers, its response writer), but the
// connections are this class's. It listens without sharing the port, accepts while fewer than --max-connections
// are open (past that, new clients wait in the kernel's queue rather than being refused), lets the intake read each
// request whole on one thread, and hands only whole requests to the --http-threads workers, in the plain form the
// intake gives them. So a slow or idle client never holds a worker, a body is counted before anyone keeps it, and
// stop() ends everything within about a second whatever the clients do.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/connection.h"
#include "server/connection_intake.h"

namespace probekit::server {

struct ServiceOptions {
  int workers = 16;                // --http-threads
  int64_t max_connections = 512;   // --max-connections
  IntakeOptions intake;
};

class HttpService : public httplib::Server {
 public:
  explicit HttpService(ServiceOptions options);
  ~HttpService() override;

  /// Listens on `host` and `port` (0: a free one) and returns the port. The port is not shared (no SO_REUSEPORT):
  /// one another program listens on is an error naming it.
  int listen_on(const std::string& host, int port);
  /// Accepts and serves connections until stop(); call after listen_on().
  void serve();
  /// Stops accepting, closes the connections that wait for a request, and lets the workers finish the responses they
  /// write (cut after a second); safe from any thread, and before serve().
  void stop();

  int64_t open_connections() const { return open_; }

 private:
  void accept_loop();
  bool wait_for_room();
  void admit(int fd);
  void closed();
  void dispatch(std::unique_ptr<Connection> connection);
  void work();
  void answer(std::unique_ptr<Connection> connection);

  // httplib's process_request: 0.18 added the connection's addresses to its parameters (Debian's 0.11 lacks them);
  // the overload that compiles is the one taken.
  template <typename Self>
  static auto process(Self& self, httplib::Stream& stream, const Connection& c, bool close, bool& closed, int)
      -> decltype(self.process_request(stream, c.remote_ip, c.remote_port, c.local_ip, c.local_port, close, closed, nullptr)) {
    return self.process_request(stream, c.remote_ip, c.remote_port, c.local_ip, c.local_port, close, closed, nullptr);
  }
  template <typename Self>
  static auto process(Self& self, httplib::Stream& stream, const Connection&, bool close, bool& closed, long)
      -> decltype(self.process_request(stream, close, closed, nullptr)) {
    return self.process_request(stream, close, closed, nullptr);
  }

  ServiceOptions options_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> open_{0};
  // Guards ready_ and the waits on it and on room; never held while a connection closes (closing takes it).
  std::mutex mutex_;
  std::condition_variable room_, work_ready_;
  std::deque<std::unique_ptr<Connection>> ready_;
  std::unique_ptr<ConnectionIntake> intake_;
  std::vector<std::thread> workers_;
};

}  // namespace probekit::server
