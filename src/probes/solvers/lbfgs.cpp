#include "probes/solvers/lbfgs.h"

#include <cmath>
#include <deque>

#include "common/error.h"

namespace probekit::probes::solvers {

namespace {

constexpr double kArmijo = 1e-4;      // sufficient decrease: f(x + t d) <= f(x) + kArmijo t d.g
constexpr double kCurvature = 0.9;    // |d.g(x + t d)| <= kCurvature |d.g(x)|
constexpr double kRoundingSlack = 1e-11;  // relative rise of f still taken for rounding when the slope says so
constexpr int kMaxHalvings = 50;

at::Tensor row_dot(const at::Tensor& a, const at::Tensor& b) { return (a * b).sum(1); }

// A row mask [K] as a column [K, 1], to select whole rows of a [K, P] tensor.
at::Tensor column(const at::Tensor& per_row) { return per_row.unsqueeze(1); }

std::vector<uint8_t> host_mask(const at::Tensor& mask) {
  at::Tensor host = mask.to(at::kCPU).to(at::kByte).contiguous();
  return std::vector<uint8_t>(host.data_ptr<uint8_t>(), host.data_ptr<uint8_t>() + host.numel());
}

struct Point {
  at::Tensor x, f, g;  // [K, P], [K], [K, P]
};

Point evaluate(const BatchedObjective& objective, const at::Tensor& x) {
  at::Tensor g = at::empty_like(x);
  at::Tensor f = objective(x, g);
  return {x, f, g};
}

// The last pairs (s, y) of every problem. A problem that had no pair to add at some iteration has zero rows
// (and rho 0) there, which the two-loop recursion passes over.
class History {
 public:
  History(int64_t problems, int64_t capacity, at::TensorOptions options)
      : capacity_(capacity), gamma_(at::ones({problems}, options)), pairs_(at::zeros({problems}, options)) {}

  // -H g by the two-loop recursion.
  at::Tensor direction(const at::Tensor& g) const {
    at::Tensor q = g.clone();
    std::vector<at::Tensor> alphas(s_.size());
    for (size_t i = s_.size(); i-- > 0;) {
      alphas[i] = rho_[i] * row_dot(s_[i], q);
      q -= column(alphas[i]) * y_[i];
    }
    at::Tensor r = column(gamma_) * q;
    for (size_t i = 0; i < s_.size(); ++i) r += s_[i] * column(alphas[i] - rho_[i] * row_dot(y_[i], r));
    return -r;
  }

  // Adds the pairs of the rows in `valid` (bool [K]); the others add nothing.
  void add(const at::Tensor& s, const at::Tensor& y, const at::Tensor& valid) {
    at::Tensor sy = row_dot(s, y), yy = row_dot(y, y);
    at::Tensor keep = valid & (sy > 0);
    s_.push_back(at::where(column(keep), s, at::zeros_like(s)));
    y_.push_back(at::where(column(keep), y, at::zeros_like(y)));
    rho_.push_back(at::where(keep, 1.0 / sy, at::zeros_like(sy)));
    gamma_ = at::where(keep, sy / yy, gamma_);
    pairs_ += keep.to(pairs_.scalar_type());
    if (static_cast<int64_t>(s_.size()) > capacity_) {
      s_.pop_front();
      y_.pop_front();
      rho_.pop_front();
    }
  }

  // Rows without any pair yet: their first step is scaled to unit length.
  at::Tensor empty_rows() const { return pairs_ == 0; }

 private:
  int64_t capacity_;
  std::deque<at::Tensor> s_, y_, rho_;
  at::Tensor gamma_, pairs_;
};

// A backtracking line search for the rows in `active` along `d` (zero in the other rows) from `at`, starting
// at step `step` [K]. Returns the accepted points (the start in rows that found none) and the rows that did.
std::pair<Point, at::Tensor> line_search(const BatchedObjective& objective, const Point& at, const at::Tensor& d,
                                         const at::Tensor& active, at::Tensor step) {
  at::Tensor slope = row_dot(d, at.g);  // negative along a descent direction
  Point accepted = at;
  at::Tensor pending = active.clone();
  for (int halving = 0; halving < kMaxHalvings; ++halving) {
    Point trial = evaluate(objective, at.x + column(step) * d);
    at::Tensor armijo = trial.f <= at.f + kArmijo * step * slope;
    at::Tensor flat = (trial.f <= at.f + kRoundingSlack * at.f.abs()) &
                      (row_dot(d, trial.g).abs() <= kCurvature * slope.abs());
    at::Tensor ok = pending & (armijo | flat) & at::isfinite(trial.f);
    accepted.x = at::where(column(ok), trial.x, accepted.x);
    accepted.f = at::where(ok, trial.f, accepted.f);
    accepted.g = at::where(column(ok), trial.g, accepted.g);
    pending &= ~ok;
    if (!pending.any().item<bool>()) break;
    step = at::where(pending, step * 0.5, step);
  }
  return {accepted, active & ~pending};
}

// Why each problem stopped, as the host sees it.
enum class Stop : uint8_t { kRunning, kConverged, kStalled };

std::vector<ProblemOutcome> outcomes(const Point& end, const at::Tensor& start_norm, const at::Tensor& iterations,
                                     const std::vector<Stop>& stops) {
  at::Tensor f = end.f.to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor relative = (end.g.norm(2, {1}) / start_norm).to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor steps = iterations.to(at::kCPU).to(at::kLong).contiguous();
  std::vector<ProblemOutcome> out(stops.size());
  for (size_t k = 0; k < stops.size(); ++k) {
    out[k].iterations = steps.data_ptr<int64_t>()[k];
    out[k].objective = f.data_ptr<double>()[k];
    out[k].relative_gradient = relative.data_ptr<double>()[k];
    out[k].converged = stops[k] == Stop::kConverged;
    out[k].stop_reason = stops[k] == Stop::kConverged ? "gradient tolerance"
                         : stops[k] == Stop::kStalled ? "no further decrease"
                                                      : "iteration limit";
  }
  return out;
}

}  // namespace

Json outcome_json(const ProblemOutcome& o) {
  return {{"method", "L-BFGS"},
          {"iterations", o.iterations},
          {"converged", o.converged},
          {"stop_reason", o.stop_reason},
          {"objective", o.objective},
          {"relative_gradient_norm", o.relative_gradient}};
}

LbfgsResult minimize_lbfgs(const BatchedObjective& objective, const at::Tensor& start, const LbfgsOptions& options) {
  if (start.dim() != 2) fail_input("L-BFGS: the start must be [problems, parameters], got {} dimensions", start.dim());
  if (options.history <= 0 || options.max_iterations < 0 || !(options.gradient_tolerance >= 0.0)) {
    fail_input("L-BFGS: history {}, iteration limit {} and tolerance {} are not usable", options.history,
               options.max_iterations, options.gradient_tolerance);
  }
  const int64_t problems = start.size(0);
  Point point = evaluate(objective, start.clone());
  at::TensorOptions row_options = point.f.options();
  // A problem whose gradient is zero at the start is solved there (the norm is kept positive for the ratio).
  at::Tensor start_norm = point.g.norm(2, {1}).clamp_min(std::numeric_limits<double>::min());
  at::Tensor active = at::ones({problems}, row_options.dtype(at::kBool));
  at::Tensor iterations = at::zeros({problems}, row_options.dtype(at::kLong));
  std::vector<Stop> stops(static_cast<size_t>(problems), Stop::kRunning);
  History history(problems, options.history, row_options);
  for (int64_t iteration = 0; iteration <= options.max_iterations; ++iteration) {
    at::Tensor gradient_norm = point.g.norm(2, {1});
    at::Tensor converged = active & (gradient_norm <= options.gradient_tolerance * start_norm);
    std::vector<uint8_t> done = host_mask(converged);
    for (size_t k = 0; k < done.size(); ++k) stops[k] = done[k] ? Stop::kConverged : stops[k];
    active &= ~converged;
    if (iteration == options.max_iterations || !active.any().item<bool>()) break;

    at::Tensor d = at::where(column(active), history.direction(point.g), at::zeros_like(point.g));
    at::Tensor step = at::where(history.empty_rows(), (1.0 / gradient_norm).clamp_max(1.0), at::ones_like(gradient_norm));
    auto [next, found] = line_search(objective, point, d, active, step);
    std::vector<uint8_t> stalled = host_mask(active & ~found);
    for (size_t k = 0; k < stalled.size(); ++k) stops[k] = stalled[k] ? Stop::kStalled : stops[k];
    history.add(next.x - point.x, next.g - point.g, found);
    iterations += found.to(at::kLong);
    active &= found;
    point = next;
  }
  return {point.x, outcomes(point, start_norm, iterations, stops)};
}

}  // namespace probekit::probes::solvers
