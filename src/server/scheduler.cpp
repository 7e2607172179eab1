#include "server/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/api/requests.h"

namespace probekit::server {

RequestError timeout_error() {
  return RequestError(408, "the request took longer than this server's time limit per request (--request-timeout)");
}

void fail_timeout() { throw timeout_error(); }

void fail_client_gone() { throw RequestError(499, "the client went away"); }

Scheduler::Scheduler(const inference::Engine& engine, int64_t max_queued_texts, std::chrono::duration<double> join_window)
    : engine_(engine), max_queued_texts_(max_queued_texts), join_window_(join_window), worker_([this] { work(); }) {}

Scheduler::~Scheduler() {
  stop();
  if (worker_.joinable()) worker_.join();
}

std::vector<inference::TextScores> Scheduler::score(std::vector<std::string> texts,
                                                    std::shared_ptr<const steering::SteeringVectors> steering,
                                                    Clock::time_point deadline) {
  auto job = std::make_unique<Job>();
  job->weight = static_cast<int64_t>(texts.size());
  job->texts = std::move(texts);
  job->steering = std::move(steering);
  job->deadline = deadline;
  std::future<std::vector<inference::TextScores>> future = job->scores.get_future();
  std::shared_ptr<std::atomic<bool>> abandoned = enqueue(std::move(job));
  return wait_for(future, deadline, *abandoned);
}

std::shared_ptr<std::atomic<bool>> Scheduler::enqueue(std::unique_ptr<Job> job) {
  if (!job->abandoned) job->abandoned = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> abandoned = job->abandoned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw RequestError(503, "the server is shutting down");
    // One that could never fit is not asked to try again.
    if (job->weight > max_queued_texts_) {
      throw RequestError(413, fmt::format("this request's {} texts are more than this server queues at once ({}: "
                                          "--max-queued-texts); send at most {} a request",
                                          job->weight, max_queued_texts_, max_queued_texts_));
    }
    if (queued_texts_ + job->weight > max_queued_texts_) {
      throw RequestError(429, fmt::format("{} texts are already waiting for the device, and this server queues at most {} "
                                          "(--max-queued-texts); try again shortly",
                                          queued_texts_, max_queued_texts_));
    }
    queued_texts_ += job->weight;
    queue_.push_back(std::move(job));
  }
  wake_.notify_all();
  return abandoned;
}

std::shared_ptr<std::atomic<bool>> Scheduler::enqueue_alone(std::function<void(std::exception_ptr)> job,
                                                             Clock::time_point deadline,
                                                             std::shared_ptr<std::atomic<bool>> abandoned) {
  auto queued = std::make_unique<Job>();
  queued->alone = std::move(job);
  queued->deadline = deadline;
  queued->abandoned = std::move(abandoned);
  return enqueue(std::move(queued));
}

void Scheduler::submit_alone(std::function<void(std::exception_ptr)> job, Clock::time_point deadline) {
  enqueue_alone(std::move(job), deadline);
}

void Scheduler::submit_generation(inference::StreamRequest request, Clock::time_point deadline) {
  request.before_pass = pass_guard(deadline, request.abandoned);
  auto job = std::make_unique<Job>();
  job->generation = std::make_unique<inference::StreamRequest>(std::move(request));
  job->deadline = deadline;
  enqueue(std::move(job));
}

bool Scheduler::stopping() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

std::function<void()> Scheduler::pass_guard(Clock::time_point deadline, std::function<bool()> abandoned) const {
  return [this, deadline, abandoned = std::move(abandoned)] {
    if (stopping()) throw RequestError(503, "the server is shutting down");
    if (abandoned && abandoned()) fail_client_gone();
    if (Clock::now() >= deadline) fail_timeout();
  };
}

std::shared_ptr<void> Scheduler::hold() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++holds_;
  }
  return std::shared_ptr<void>(nullptr, [this](void*) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --holds_;
    }
    wake_.notify_all();
  });
}

int64_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Scheduler::queued_texts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_texts_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Scheduler::stop() {
  std::deque<std::unique_ptr<Job>> refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    refused.swap(queue_);
    queued_texts_ = 0;
  }
  wake_.notify_all();
  auto error = std::make_exception_ptr(RequestError(503, "the server is shutting down"));
  for (auto& job : refused) refuse(*job, error);
}

void Scheduler::refuse(Job& job, std::exception_ptr error) {
  if (job.alone) return job.alone(error);
  if (job.generation) return job.generation->on_end(inference::GeneratedText{job.generation->prompt_ids, {}, {}, generation::StopReason::kCancelled}, error);
  job.scores.set_exception(error);
}

// Waits for work (while no stream decodes) and takes what is queued unless a hold keeps it there; false once
// stopping.
bool Scheduler::take_queued(std::vector<std::unique_ptr<Job>>& jobs, bool streaming) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return stopping_ || streaming || work_waiting(); });
  if (stopping_) return false;
  if (!work_waiting()) return true;
  take_all(jobs);
  ++stats_.cycles;
  return true;
}

bool Scheduler::work_waiting() const { return !queue_.empty() && holds_ == 0; }

void Scheduler::take_all(std::vector<std::unique_ptr<Job>>& jobs) {
  for (auto& job : queue_) jobs.push_back(std::move(job));
  queue_.clear();
  queued_texts_ = 0;
}

// 16 clients started together reached an idle worker over a few milliseconds: the first one's prompt ran alone
// (13 ms) while the other 15 waited for it, and their first tokens came 20 ms later than in one pass
// (bench/results/streams_h200_2026-11-30c.md). A stream arriving alone waits one window.
void Scheduler::gather_arrivals(std::vector<std::unique_ptr<Job>>& jobs) {
  const bool stream = std::any_of(jobs.begin(), jobs.end(), [](const auto& job) { return job && job->generation; });
  if (!stream || join_window_ <= std::chrono::duration<double>::zero()) return;
  const auto window = std::chrono::duration_cast<Clock::duration>(join_window_);
  const Clock::time_point last = Clock::now() + 10 * window;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && Clock::now() < last) {
    const Clock::time_point until = std::min(last, Clock::now() + window);
    if (!wake_.wait_until(lock, until, [&] { return stopping_ || work_waiting(); })) return;
    take_all(jobs);
  }
}

void Scheduler::work() {
  std::unique_ptr<inference::StreamBatch> batch;
  while (true) {
    std::vector<std::unique_ptr<Job>> jobs;
    if (!take_queued(jobs, batch && !batch->empty())) break;
    if (!batch || batch->empty()) gather_arrivals(jobs);
    drop_expired(jobs);
    serve_rankings(jobs);
    for (auto& job : jobs) {
      if (!job || !job->alone) continue;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.exclusive_jobs;
      }
      job->alone(nullptr);
    }
    // Streams that arrived while others' prompts ran join before the next step, so that the streams decoding wait
    // for one round of arrivals' prompts, not one round per step (16 streams started together came in waves, and
    // each wave stalled the ones before it). At most --max-streams streams are open, which bounds these rounds.
    if (join_streams(jobs, batch) && generation_queued()) continue;
    if (batch) decode_step(*batch);
  }
  if (batch) batch->end_all(std::make_exception_ptr(RequestError(503, "the server is shutting down")));
}

bool Scheduler::generation_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holds_ == 0 && std::any_of(queue_.begin(), queue_.end(), [](const auto& job) { return job->generation != nullptr; });
}

// The new streams' prompts run together and they join the batch; the time from each one's arrival to each token is
// measured here. Whether any joined.
bool Scheduler::join_streams(std::vector<std::unique_ptr<Job>>& jobs, std::unique_ptr<inference::StreamBatch>& batch) {
  std::vector<inference::StreamRequest> requests;
  for (auto& job : jobs) {
    if (!job || !job->generation) continue;
    if (job->generation->abandoned && job->generation->abandoned()) {
      refuse(*job, std::make_exception_ptr(RequestError(499, "the client went away before the stream's prompt ran")));
      job.reset();  // its stream, and the slot with it, go now
      continue;
    }
    try {
      if (!batch) batch = std::make_unique<inference::StreamBatch>(engine_);
    } catch (...) {
      refuse(*job, std::current_exception());
      continue;
    }
    inference::StreamRequest request = std::move(*job->generation);
    auto previous = std::make_shared<Clock::time_point>(job->queued_at);
    request.on_token = [this, previous, inner = std::move(request.on_token)](const inference::ScoredToken& token) {
      const Clock::time_point now = Clock::now();
      metrics_.observe_token(token.index == 0, std::chrono::duration<double>(now - *previous).count());
      *previous = now;
      return inner(token);
    };
    requests.push_back(std::move(request));
  }
  if (requests.empty()) return false;
  const size_t arriving = requests.size();
  const Clock::time_point started = Clock::now();
  size_t joined = 0;
  try {
    joined = batch->join(std::move(requests));
  } catch (...) {
    // What join leaves to throw (the rows' steering placed again, a stream's callback) ends the batch's streams, as a
    // failed step does.
    spdlog::error("streams failed to join; the {} streams of the batch end", batch->size());
    batch->end_all(std::current_exception());
  }
  spdlog::debug("{} of {} arriving streams joined in {:.1f} ms", joined, arriving,
                std::chrono::duration<double, std::milli>(Clock::now() - started).count());
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.streams_joined += static_cast<int64_t>(joined);
  stats_.joins += joined > 0 ? 1 : 0;
  return joined > 0;
}

void Scheduler::decode_step(inference::StreamBatch& batch) {
  if (batch.empty()) return;
  const auto streams = static_cast<int64_t>(batch.size());
  // Counted first, so that a client holding a token of the step sees the step counted.
  metrics_.observe_step(streams);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.decode_steps;
    stats_.largest_batch = std::max(stats_.largest_batch, streams);
  }
  try {
    batch.step();
  } catch (...) {
    spdlog::error("a decode step failed; its {} streams end", streams);
    batch.end_all(std::current_exception());
  }
}

// A request that stopped waiting leaves the queue at once, so that its texts stop counting against
// --max-queued-texts while the worker is busy; one the worker has already taken is dropped there (drop_expired).
void Scheduler::withdraw(const std::atomic<bool>& abandoned) {
  std::unique_ptr<Job> withdrawn;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const std::unique_ptr<Job>& job) { return job->abandoned.get() == &abandoned; });
    if (it == queue_.end()) return;
    queued_texts_ -= (*it)->weight;
    withdrawn = std::move(*it);
    queue_.erase(it);
  }
  refuse(*withdrawn, std::make_exception_ptr(timeout_error()));
}

// A request that stopped waiting, or whose time is up, is not worth a forward: it is refused and its slot emptied.
void Scheduler::drop_expired(std::vector<std::unique_ptr<Job>>& jobs) {
  Clock::time_point now = Clock::now();
  for (auto& job : jobs) {
    if (job && (*job->abandoned || job->deadline <= now)) {
      refuse(*job, std::make_exception_ptr(timeout_error()));
      job.reset();
    }
  }
}

// Every queued ranking's texts in one engine call, then each request's share of the scores.
void Scheduler::serve_rankings(std::vector<std::unique_ptr<Job>>& jobs) {
  std::vector<std::string> texts;
  std::vector<const steering::SteeringVectors*> steering;  // per text: its request's steering (null: none)
  std::vector<Job*> rankings;
  bool steered = false;
  for (auto& job : jobs) {
    if (!job || job->alone || job->generation) continue;
    rankings.push_back(job.get());
    texts.insert(texts.end(), job->texts.begin(), job->texts.end());
    steering.insert(steering.end(), job->texts.size(), job->steering.get());
    steered = steered || job->steering != nullptr;
  }
  if (rankings.empty()) return;
  std::vector<inference::TextScores> scores;
  try {
    scores = steered ? engine_.score(texts, steering) : engine_.score(texts);
  } catch (...) {
    for (Job* job : rankings) job->scores.set_exception(std::current_exception());
    return;
  }
  {
    // Counted before anyone is answered, so that a client holding its answer sees it counted.
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.texts_scored += static_cast<int64_t>(texts.size());
    stats_.batched_requests += static_cast<int64_t>(rankings.size());
  }
  size_t first = 0;
  for (Job* job : rankings) {
    std::vector<inference::TextScores> mine(std::make_move_iterator(scores.begin() + static_cast<std::ptrdiff_t>(first)),
                                            std::make_move_iterator(scores.begin() + static_cast<std::ptrdiff_t>(first + job->texts.size())));
    first += job->texts.size();
    job->scores.set_value(std::move(mine));
  }
  spdlog::debug("scored {} texts of {} requests in one cycle", texts.size(), rankings.size());
}

}  // namespace probekit::server
