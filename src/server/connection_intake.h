// The one thread that reads requests off probe_server's connections, all of them at once (poll), so that a slow
// or idle client costs a descriptor and a buffer, never a worker thread. A request goes to a worker only when it
// is whole; one that takes past --client-timeout (headers and body together, counted from the connection or from
// the previous response) is answered 408 and closed, an idle connection is closed then. The API key is checked
// as soon as the headers are in, before any body is waited for.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/api/request_framing.h"
#include "server/connection.h"

namespace probekit::server {

struct IntakeOptions {
  FramingLimits framing;
  std::chrono::milliseconds client_timeout{10000};
  std::string api_key;  // empty: none
  // The whole response to a request refused before it is whole (its status, the message, the path asked for, empty
  // when the request line did not arrive): the endpoint's error shape, counted; unset: error_response.
  std::function<std::string(int, const std::string&, const std::string&)> refusal;
};

class ConnectionIntake {
 public:
  /// `dispatch` gets each connection whose request is whole (or refused on its headers alone, close_after set).
  ConnectionIntake(IntakeOptions options, std::function<void(std::unique_ptr<Connection>)> dispatch);
  ~ConnectionIntake();
  ConnectionIntake(const ConnectionIntake&) = delete;
  ConnectionIntake& operator=(const ConnectionIntake&) = delete;

  /// A new connection, or one back from a worker for its next request: its time starts now.
  void add(std::unique_ptr<Connection> connection);
  /// A connection whose response said it closes, but whose client may still be sending a body: what arrives is
  /// read and dropped for a moment, so that the client sees the response rather than a reset.
  void linger(std::unique_ptr<Connection> connection);
  /// Closes every connection held and ends the thread; what arrives later is closed at once.
  void stop();

 private:
  void hand_over(std::unique_ptr<Connection> connection);
  void run();
  bool take_arrivals();
  bool read_from(Connection& connection);
  void frame(std::unique_ptr<Connection>& connection);
  /// The response refusing `connection`'s request (options_.refusal, else error_response).
  std::string refusal(const Connection& connection, int status, const std::string& message) const;
  void refuse(Connection& connection, int status, const std::string& message);
  bool expired(Connection& connection, Connection::Clock::time_point now);
  int wait_ms(Connection::Clock::time_point now) const;

  IntakeOptions options_;
  std::function<void(std::unique_ptr<Connection>)> dispatch_;
  int wake_[2] = {-1, -1};  // a pipe: a write wakes the poll
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> arrivals_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Connection>> held_;  // the intake thread's own
  std::thread thread_;
};

/// Whether an Authorization header carries the API key as a bearer token; compares in a time that says nothing
/// about the key.
bool bearer_matches(const std::string& authorization, const std::string& key);

/// Whether a request for `path` must carry the API key (when there is one): all but the page and /healthz.
bool needs_api_key(const std::string& path);

}  // namespace probekit::server
