// The one worker that uses the device: request threads queue work and wait; the worker takes everything queued,
// scores the texts of all queued rankings in one engine call (batched forwards), runs per-token scoring one job
// after another, lets new generation streams join the decode batch, and then runs one decode step for every open
// stream (continuous batching). It takes what was queued again before each step, so rankings wait one token at
// most, streams join at the next step and leave when they end; two forwards never run at once on the device.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "inference/engine.h"
#include "inference/stream_batch.h"
#include "server/api/requests.h"
#include "server/connection.h"
#include "server/metrics.h"

namespace probekit::server {

using Clock = std::chrono::steady_clock;

/// What the worker has done, for /v1/info and the tests.
struct SchedulerStats {
  int64_t cycles = 0;           // times the worker took what was queued
  int64_t texts_scored = 0;     // texts of rankings scored
  int64_t batched_requests = 0;  // ranking requests served
  int64_t exclusive_jobs = 0;   // per-token jobs run
  int64_t streams_joined = 0;   // generation streams that joined the decode batch
  int64_t joins = 0;            // times arriving streams joined it (their prompts in one pass)
  int64_t decode_steps = 0;     // decode steps (one forward for every open stream)
  int64_t largest_batch = 0;    // the most streams one step decoded
};

class Scheduler {
 public:
  /// `join_window`: see gather_arrivals (zero: none).
  Scheduler(const inference::Engine& engine, int64_t max_queued_texts,
            std::chrono::duration<double> join_window = std::chrono::duration<double>::zero());
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Scores `texts` together with the other rankings queued at the time, steered as `steering` says (null: not);
  /// requests that steer differently share the batch, a vector per row. Throws RequestError: 429 when the queue
  /// is full, 413 when it could never hold them, 408 past `deadline`, 499 once the client of the request this thread
  /// answers has hung up (client_gone), 503 once stopping.
  std::vector<inference::TextScores> score(std::vector<std::string> texts,
                                           std::shared_ptr<const steering::SteeringVectors> steering,
                                           Clock::time_point deadline);

  /// Runs `work` on the worker, alone on the device, and returns its result (errors as above). `work` is given the
  /// job's pass_guard: a long job ends at its next pass once its request has stopped waiting.
  template <typename Result>
  Result run_alone(std::function<Result(const std::function<void()>& before_pass)> work, Clock::time_point deadline);

  /// Queues `job` to run on the worker, alone on the device, without waiting for it: it is called with nullptr
  /// to run, or with the error that refused it (its deadline passed, or the server is stopping). Throws the
  /// queue's errors (429, 503) at once.
  void submit_alone(std::function<void(std::exception_ptr refused)> job, Clock::time_point deadline);

  /// Queues a generation stream: it joins the streams decoding together at the worker's next step. Its on_end is
  /// called once in every case: with the error that refused it (deadline, shutting down), that ended it, or none.
  /// A prompt monitor's reading of its prompt ends as pass_guard says.
  /// Throws the queue's errors (429, 503) at once.
  void submit_generation(inference::StreamRequest request, Clock::time_point deadline);

  /// True once stop() was called: long jobs end early.
  bool stopping() const;
  /// What a long job calls before each of its passes (readout::Request::before_pass): it throws once the server is
  /// stopping (503), the job's reader has gone (`abandoned`, 499) or its deadline has passed (408), so that the device
  /// is not kept for work nobody will read.
  std::function<void()> pass_guard(Clock::time_point deadline, std::function<bool()> abandoned = {}) const;

  /// Keeps the worker from starting its next cycle while the returned handle lives (tests queue several
  /// requests this way and see them served by one cycle).
  std::shared_ptr<void> hold();

  int64_t queued_texts() const;
  /// Requests waiting for the worker (rankings, per-token jobs, streams not yet joined).
  int64_t queue_depth() const;
  SchedulerStats stats() const;
  ServerMetrics& metrics() { return metrics_; }

  /// Refuses queued and new work with 503 and ends the worker; idempotent.
  void stop();

 private:
  struct Job {
    std::vector<std::string> texts;  // a ranking's texts, batched with the others
    std::shared_ptr<const steering::SteeringVectors> steering;  // theirs; null: none
    std::promise<std::vector<inference::TextScores>> scores;
    std::function<void(std::exception_ptr)> alone;  // or: run alone; given an error instead when refused
    std::unique_ptr<inference::StreamRequest> generation;  // or: a stream to join the decode batch
    Clock::time_point queued_at = Clock::now();
    Clock::time_point deadline;
    std::shared_ptr<std::atomic<bool>> abandoned;  // its request has stopped waiting
    int64_t weight = 1;  // texts it counts against --max-queued-texts
  };

  /// Queues `job`, giving it an abandoned flag unless it has one, and returns that flag.
  std::shared_ptr<std::atomic<bool>> enqueue(std::unique_ptr<Job> job);
  std::shared_ptr<std::atomic<bool>> enqueue_alone(std::function<void(std::exception_ptr)> job, Clock::time_point deadline,
                                                   std::shared_ptr<std::atomic<bool>> abandoned = nullptr);
  void work();
  bool take_queued(std::vector<std::unique_ptr<Job>>& jobs, bool streaming);
  /// Whether queued work may be taken (no hold keeps it there); the caller holds mutex_.
  bool work_waiting() const;
  /// Moves the queue into `jobs`; the caller holds mutex_.
  void take_all(std::vector<std::unique_ptr<Job>>& jobs);
  /// With no stream decoding and a stream among `jobs`, takes what arrives while arrivals keep coming within
  /// join_window_ of each other (at most 10 windows in all).
  void gather_arrivals(std::vector<std::unique_ptr<Job>>& jobs);
  void serve_rankings(std::vector<std::unique_ptr<Job>>& jobs);
  /// Whether a stream joined.
  bool join_streams(std::vector<std::unique_ptr<Job>>& jobs, std::unique_ptr<inference::StreamBatch>& batch);
  /// Whether a generation stream waits in the queue (and no hold keeps it there).
  bool generation_queued() const;
  void decode_step(inference::StreamBatch& batch);
  static void drop_expired(std::vector<std::unique_ptr<Job>>& jobs);
  static void refuse(Job& job, std::exception_ptr error);
  /// Waits for a queued job's result as await_reply does; a request that stops waiting marks the job abandoned and
  /// takes it out of the queue.
  template <typename T>
  T wait_for(std::future<T>& future, Clock::time_point deadline, std::atomic<bool>& abandoned);
  void withdraw(const std::atomic<bool>& abandoned);

  const inference::Engine& engine_;
  int64_t max_queued_texts_;
  std::chrono::duration<double> join_window_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queue_;
  int64_t queued_texts_ = 0;
  int64_t holds_ = 0;
  bool stopping_ = false;
  SchedulerStats stats_;
  ServerMetrics metrics_;
  std::thread worker_;
};

/// The 408 of a request past its deadline.
RequestError timeout_error();
/// Throws the 408 of a request past its deadline.
[[noreturn]] void fail_timeout();
/// Throws the 499 of a request whose client went away.
[[noreturn]] void fail_client_gone();

/// How often a request waiting on the worker asks whether its client is still there (client_gone).
inline constexpr std::chrono::milliseconds kClientCheck{100};

/// Waits for `future` until `deadline`, asking every kClientCheck whether the client of the request this thread
/// answers is still there (client_gone). A request that stops waiting calls `leave` (to let its work go) and throws
/// `gone` (499) or `late` (408).
template <typename T>
T await_reply(std::future<T>& future, Clock::time_point deadline, const std::function<void()>& leave,
              const RequestError& late) {
  while (future.wait_until(std::min(deadline, Clock::now() + kClientCheck)) != std::future_status::ready) {
    const bool gone = client_gone();
    if (!gone && Clock::now() < deadline) continue;
    leave();
    if (gone) fail_client_gone();
    throw late;
  }
  return future.get();
}

template <typename T>
T Scheduler::wait_for(std::future<T>& future, Clock::time_point deadline, std::atomic<bool>& abandoned) {
  return await_reply(future, deadline, [this, &abandoned] {
    abandoned = true;
    withdraw(abandoned);
  }, timeout_error());
}

template <typename Result>
Result Scheduler::run_alone(std::function<Result(const std::function<void()>& before_pass)> work,
                            Clock::time_point deadline) {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  auto job = [promise, work = std::move(work), guard = pass_guard(deadline, [abandoned] { return abandoned->load(); })](
                 std::exception_ptr refused) {
    if (refused) return promise->set_exception(refused);
    try {
      promise->set_value(work(guard));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  };
  enqueue_alone(std::move(job), deadline, abandoned);
  return wait_for(future, deadline, *abandoned);
}

}  // namespace probekit::server
