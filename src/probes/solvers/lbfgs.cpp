#include "probes/solvers/lbfgs.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace probekit::probes::solvers {

namespace {

constexpr double kArmijo = 1e-4;          // sufficient decrease: f(x + t d) <= f(x) + kArmijo t d.g
constexpr double kCurvature = 0.9;        // |d.g(x + t d)| <= kCurvature |d.g(x)|
constexpr double kRoundingSlack = 1e-11;  // relative rise of f still taken for rounding when the slope says so
constexpr int kMaxTrials = 60;
// Every so many iterations the scores are recomputed from the parameters rather than moved along, so the
// rounding of the moves cannot accumulate.
constexpr int64_t kRescoreEvery = 50;

at::Tensor row_dot(const at::Tensor& a, const at::Tensor& b) { return (a * b).sum(1); }

// A row mask [K] as a column [K, 1], to select whole rows of a [K, P] tensor.
at::Tensor column(const at::Tensor& per_row) { return per_row.unsqueeze(1); }

std::vector<uint8_t> host_mask(const at::Tensor& mask) {
  at::Tensor host = mask.to(at::kCPU).to(at::kByte).contiguous();
  return std::vector<uint8_t>(host.data_ptr<uint8_t>(), host.data_ptr<uint8_t>() + host.numel());
}

// Problems' parameters, scores, objective values and gradients: [K, P], [K, M], [K], [K, P]. Rows are given
// in increasing order, so all K rows are the whole point (no copy).
struct Point {
  at::Tensor x, z, f, g;
  bool every(const at::Tensor& r) const { return r.numel() == x.size(0); }
  Point rows(const at::Tensor& r) const {
    if (every(r)) return *this;
    return {x.index_select(0, r), z.index_select(0, r), f.index_select(0, r), g.index_select(0, r)};
  }
  void set_rows(const at::Tensor& r, const Point& p) {
    if (every(r)) {
      *this = p;
      return;
    }
    x.index_copy_(0, r, p.x);
    z.index_copy_(0, r, p.z);
    f.index_copy_(0, r, p.f);
    g.index_copy_(0, r, p.g);
  }
};

at::Tensor penalty_value(const LinearModelObjective& objective, const at::Tensor& x) {
  return row_dot(x * objective.penalty, x) * 0.5;
}

// The point of parameters x and scores z of the problems `rows`, given the loss there.
Point complete(const LinearModelObjective& objective, at::Tensor x, at::Tensor z, const at::Tensor& rows,
               const std::pair<at::Tensor, at::Tensor>& loss) {
  at::Tensor f = loss.first + penalty_value(objective, x);
  at::Tensor g = objective.pullback(loss.second, rows).addcmul_(x, objective.penalty);
  return {std::move(x), std::move(z), std::move(f), std::move(g)};
}

Point evaluate(const LinearModelObjective& objective, const at::Tensor& x, const at::Tensor& rows) {
  at::Tensor z = objective.scores(x, rows);
  auto loss = objective.loss(z, rows);
  return complete(objective, x, std::move(z), rows, loss);
}

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

// a += scale * b
void add_scaled(double* a, const double* b, double scale, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) a[j] += scale * b[j];
}

// The two-loop recursion of one problem (Nocedal and Wright, algorithm 7.4): q [n] holds its gradient on entry
// and -H g on return; s and y are its rows of the pairs, oldest first, rho their 1 / s.y (0 where it added none).
void two_loop(double* q, int64_t n, const std::vector<const double*>& s, const std::vector<const double*>& y,
              const std::vector<double>& rho, double gamma) {
  std::vector<double> alphas(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    alphas[i] = rho[i] * dot(s[i], q, n);
    add_scaled(q, y[i], -alphas[i], n);
  }
  for (int64_t j = 0; j < n; ++j) q[j] *= gamma;
  for (size_t i = 0; i < s.size(); ++i) add_scaled(q, s[i], alphas[i] - rho[i] * dot(y[i], q, n), n);
  for (int64_t j = 0; j < n; ++j) q[j] = -q[j];
}

// The last pairs (s, y) of every problem. A problem that had no pair to add at some iteration has zero rows
// (and rho 0) there, which the two-loop recursion passes over.
class History {
 public:
  History(int64_t problems, int64_t capacity, at::TensorOptions options)
      : capacity_(capacity), gamma_(at::ones({problems}, options)), pairs_(at::zeros({problems}, options)) {}

  // -H g [R, P] of the problems `rows` [R] by the two-loop recursion: on the CPU each problem's recursion runs
  // over its own rows of the history in one pass per pair, which then stay in cache for the second loop.
  at::Tensor direction(const at::Tensor& g, const at::Tensor& rows) const {
    if (!g.is_cpu() || g.scalar_type() != at::kDouble) return tensor_direction(g).index_select(0, rows);
    at::Tensor out = g.index_select(0, rows).contiguous();
    at::Tensor problem_of = rows.to(at::kLong).contiguous();
    const int64_t parameters = g.size(1), pairs = static_cast<int64_t>(s_.size());
    at::parallel_for(0, rows.numel(), 1, [&](int64_t begin, int64_t end) {
      std::vector<const double*> s(pairs), y(pairs);
      std::vector<double> rho(pairs);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t k = problem_of.data_ptr<int64_t>()[r];
        for (int64_t i = 0; i < pairs; ++i) {
          s[i] = s_[i].data_ptr<double>() + k * parameters;
          y[i] = y_[i].data_ptr<double>() + k * parameters;
          rho[i] = rho_[i].data_ptr<double>()[k];
        }
        two_loop(out.data_ptr<double>() + r * parameters, parameters, s, y, rho, gamma_.data_ptr<double>()[k]);
      }
    });
    return out;
  }

  // Adds the pairs (s, y) [R, P] of the problems `rows` [R]; the other problems add nothing at this step.
  void add(const at::Tensor& rows, at::Tensor s, at::Tensor y) {
    if (rows.numel() == 0) return;
    const int64_t problems = gamma_.size(0);
    at::Tensor sy = row_dot(s, y), yy = row_dot(y, y);
    at::Tensor keep = sy > 0, kept = keep.to(s.scalar_type());
    s.mul_(column(kept));
    y.mul_(column(kept));
    at::Tensor rho = at::where(keep, 1.0 / sy, at::zeros_like(sy));
    gamma_.index_copy_(0, rows, at::where(keep, sy / yy, gamma_.index_select(0, rows)));
    pairs_.index_add_(0, rows, kept);
    if (rows.numel() != problems) {
      s = at::zeros({problems, s.size(1)}, s.options()).index_copy_(0, rows, s);
      y = at::zeros({problems, y.size(1)}, y.options()).index_copy_(0, rows, y);
      rho = at::zeros({problems}, rho.options()).index_copy_(0, rows, rho);
    }
    s_.push_back(s.contiguous());
    y_.push_back(y.contiguous());
    rho_.push_back(std::move(rho));
    if (static_cast<int64_t>(s_.size()) > capacity_) {
      s_.pop_front();
      y_.pop_front();
      rho_.pop_front();
    }
  }

  // Rows without any pair yet: their first step is scaled to unit length.
  at::Tensor empty_rows() const { return pairs_ == 0; }

 private:
  // The same recursion in tensor operations over all problems at once, for devices other than the CPU.
  at::Tensor tensor_direction(const at::Tensor& g) const {
    at::Tensor q = g.clone();
    std::vector<at::Tensor> alphas(s_.size());
    for (size_t i = s_.size(); i-- > 0;) {
      alphas[i] = rho_[i] * row_dot(s_[i], q);
      q.addcmul_(y_[i], column(alphas[i]), -1.0);
    }
    at::Tensor r = q.mul_(column(gamma_));
    for (size_t i = 0; i < s_.size(); ++i) r.addcmul_(s_[i], column(alphas[i] - rho_[i] * row_dot(y_[i], r)));
    return r.neg_();
  }

  int64_t capacity_;
  std::deque<at::Tensor> s_, y_, rho_;
  at::Tensor gamma_, pairs_;
};

// One line of each problem searched: phi(t) = loss(z + t u) + (a0 + a1 t + a2 t^2), the penalty along the line.
struct Line {
  at::Tensor z, u, a0, a1, a2, f, slope;  // slope: phi'(0) = d.g, negative along a descent direction
};

// The accepted steps of a line search: the lines that found one (`moved`, increasing) and, for those, the step t
// [R], the loss there [R] and its derivative (rows `moved` of `dloss` [lines, M]).
struct Steps {
  at::Tensor moved, t, loss, dloss;
};

std::vector<double> host_values(const at::Tensor& values) {
  at::Tensor host = values.to(at::kCPU).to(at::kDouble).contiguous();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

// Values picked from host vectors, as a tensor of `options`.
template <typename T>
at::Tensor device_values(const std::vector<T>& values, at::TensorOptions options) {
  return at::tensor(at::ArrayRef<T>(values), at::TensorOptions().dtype(options.dtype())).to(options.device());
}

// Finds, for each line, a step satisfying the strong Wolfe conditions (or the rounding clause), from `t`:
// doubled while the slope is still steep and the decrease sufficient, then bisected within the bracket. The
// losses along the lines are tensor work over the lines still searching; the bracketing, a few numbers per line,
// runs on the host.
Steps search_lines(const LinearModelObjective& objective, const Line& line, const at::Tensor& rows, std::vector<double> t) {
  const auto count = static_cast<int64_t>(t.size());
  // One copy to the host for the lines' numbers (and one per trial for the losses and slopes).
  const std::vector<double> numbers = host_values(at::stack({line.f, line.slope, line.a0, line.a1, line.a2}));
  auto column_of = [&](int64_t i) { return std::vector<double>(numbers.begin() + i * count, numbers.begin() + (i + 1) * count); };
  const std::vector<double> f0 = column_of(0), slope = column_of(1), a0 = column_of(2), a1 = column_of(3), a2 = column_of(4);
  std::vector<double> low(t.size(), 0.0), high(t.size(), std::numeric_limits<double>::infinity()), accepted_t(t.size()),
      accepted_loss(t.size());
  std::vector<int64_t> pending(t.size()), accepted;
  std::iota(pending.begin(), pending.end(), int64_t{0});
  at::Tensor dloss_rows = at::zeros_like(line.z);
  const at::TensorOptions index_options = rows.options(), value_options = line.f.options();
  for (int trial = 0; trial < kMaxTrials && !pending.empty(); ++trial) {
    const bool every = static_cast<int64_t>(pending.size()) == count;
    at::Tensor searching = every ? at::Tensor() : device_values(pending, index_options);
    auto pick = [&](const at::Tensor& v) { return every ? v : v.index_select(0, searching); };
    std::vector<double> tp(pending.size());
    for (size_t j = 0; j < pending.size(); ++j) tp[j] = t[pending[j]];
    at::Tensor u = pick(line.u);
    auto [loss, dloss] = objective.loss(at::addcmul(pick(line.z), column(device_values(tp, value_options)), u), pick(rows));
    const std::vector<double> both = host_values(at::stack({loss, row_dot(dloss, u)}));
    const auto searching_count = static_cast<std::ptrdiff_t>(pending.size());
    const std::vector<double> losses(both.begin(), both.begin() + searching_count), slopes(both.begin() + searching_count, both.end());
    // The lines that found their step, and their positions among the pending; the lines still searching.
    std::vector<int64_t> found, found_at, still;
    for (size_t j = 0; j < pending.size(); ++j) {
      const int64_t k = pending[j];
      const double phi = losses[j] + a0[k] + a1[k] * tp[j] + a2[k] * tp[j] * tp[j];
      const double dphi = slopes[j] + a1[k] + 2.0 * a2[k] * tp[j];
      const bool armijo = phi <= f0[k] + kArmijo * tp[j] * slope[k] && std::isfinite(phi);
      const bool curvature = std::abs(dphi) <= kCurvature * std::abs(slope[k]);
      const bool flat = phi <= f0[k] + kRoundingSlack * std::abs(f0[k]) && curvature;
      if ((armijo && curvature) || flat) {
        found.push_back(k);
        found_at.push_back(static_cast<int64_t>(j));
        accepted_t[k] = tp[j];
        accepted_loss[k] = losses[j];
        continue;
      }
      (!armijo || dphi > 0.0 ? high : low)[k] = tp[j];  // the minimum along the line lies before or after t
      t[k] = std::isinf(high[k]) ? tp[j] * 2.0 : (low[k] + high[k]) * 0.5;
      still.push_back(k);
    }
    if (!found.empty()) {
      dloss_rows.index_copy_(0, device_values(found, index_options), dloss.index_select(0, device_values(found_at, index_options)));
      accepted.insert(accepted.end(), found.begin(), found.end());
    }
    pending = std::move(still);
  }
  std::sort(accepted.begin(), accepted.end());
  std::vector<double> steps, losses;
  for (int64_t k : accepted) {
    steps.push_back(accepted_t[k]);
    losses.push_back(accepted_loss[k]);
  }
  return {device_values(accepted, index_options), device_values(steps, value_options), device_values(losses, value_options),
          dloss_rows};
}

// The problems that moved at a step, and their pairs: the step s and the change of the gradient y, [R, P].
struct Moves {
  at::Tensor rows, s, y;
};

// Moves the problems `rows` of `point` along `d` [K', P] by a line search from the steps `t` [K'].
Moves step_along(const LinearModelObjective& objective, Point& point, const at::Tensor& rows, const at::Tensor& d,
                 const at::Tensor& t, bool rescore) {
  Point from = point.rows(rows);
  at::Tensor scaled = d * objective.penalty;
  Line line{from.z,
            objective.scores(d, rows),
            penalty_value(objective, from.x),
            row_dot(scaled, from.x),
            row_dot(scaled, d) * 0.5,
            from.f,
            row_dot(d, from.g)};
  Steps steps = search_lines(objective, line, rows, host_values(t));
  const at::Tensor& moved = steps.moved;
  const bool every = moved.numel() == rows.numel();
  auto pick = [&](const at::Tensor& v) { return every ? v : v.index_select(0, moved); };
  at::Tensor moved_rows = pick(rows);
  if (moved.numel() == 0) return {moved_rows, {}, {}};
  at::Tensor step = column(steps.t);
  at::Tensor s = pick(d).mul(step);
  at::Tensor x = pick(from.x) + s;
  Point to = rescore ? evaluate(objective, x, moved_rows)
                     : complete(objective, x, at::addcmul(pick(from.z), step, pick(line.u)), moved_rows,
                                {steps.loss, pick(steps.dloss)});
  at::Tensor y = to.g - pick(from.g);
  point.set_rows(moved_rows, to);
  return {moved_rows, s, y};
}

// Why each problem stopped, as the host sees it.
enum class Stop : uint8_t { kRunning, kConverged, kRoundingLimit, kStalled };

// The gradient norm under which each problem has converged (LbfgsOptions): against the penalty's scale where the
// objective has a penalty, else against the gradient's norm at the start.
class ConvergenceBound {
 public:
  ConvergenceBound(const LinearModelObjective& objective, const at::Tensor& start_norm, const LbfgsOptions& options)
      : relative_(options.gradient_tolerance * start_norm), rounding_(objective.rounding * start_norm),
        tolerance_(options.penalty_tolerance) {
    at::Tensor positive = objective.penalty.masked_select(objective.penalty > 0);
    penalty_ = positive.numel() > 0 ? positive.min().item<double>() : 0.0;
  }

  /// [K]: the bound for each problem at parameters x [K, P].
  at::Tensor at(const at::Tensor& x) const {
    if (penalty_ == 0.0) return relative_;
    return at::maximum(x.abs().amax(1) * (tolerance_ * penalty_), rounding_);
  }

  /// [K]: where a problem whose line search finds no decrease any more has still converged: with a penalty, its
  /// gradient within eight times the rounding floor (the products' whole epsilon), where the compiler's rounding of
  /// the products decides how far the objective can still fall; without one, the relative tolerance alone.
  at::Tensor at_rounding_limit(const at::Tensor& x) const {
    return penalty_ == 0.0 ? relative_ : at::maximum(at(x), rounding_ * 8.0);
  }

 private:
  at::Tensor relative_, rounding_;
  double tolerance_;
  double penalty_ = 0.0;
};

std::vector<ProblemOutcome> outcomes(const Point& end, const at::Tensor& start_norm, const at::Tensor& bound,
                                     const at::Tensor& iterations, const std::vector<Stop>& stops) {
  at::Tensor f = end.f.to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor relative = (end.g.norm(2, {1}) / start_norm).to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor over_bound = (end.g.norm(2, {1}) / bound).to(at::kCPU).to(at::kDouble).contiguous();
  at::Tensor steps = iterations.to(at::kCPU).to(at::kLong).contiguous();
  std::vector<ProblemOutcome> out(stops.size());
  for (size_t k = 0; k < stops.size(); ++k) {
    out[k].iterations = steps.data_ptr<int64_t>()[k];
    out[k].objective = f.data_ptr<double>()[k];
    out[k].relative_gradient = relative.data_ptr<double>()[k];
    out[k].gradient_over_bound = over_bound.data_ptr<double>()[k];
    out[k].converged = stops[k] == Stop::kConverged || stops[k] == Stop::kRoundingLimit;
    out[k].stop_reason = stops[k] == Stop::kConverged       ? "gradient tolerance"
                         : stops[k] == Stop::kRoundingLimit ? "rounding limit"
                         : stops[k] == Stop::kStalled       ? "no further decrease"
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
          {"relative_gradient_norm", o.relative_gradient},
          {"gradient_over_bound", o.gradient_over_bound}};
}

LbfgsResult minimize_lbfgs(const LinearModelObjective& objective, const at::Tensor& start, const LbfgsOptions& options) {
  if (start.dim() != 2) fail_input("L-BFGS: the start must be [problems, parameters], got {} dimensions", start.dim());
  if (!objective.penalty.defined() || objective.penalty.numel() != start.size(1)) {
    fail_input("L-BFGS: a penalty of {} values for {} parameters", objective.penalty.defined() ? objective.penalty.numel() : 0,
               start.size(1));
  }
  if (options.history <= 0 || options.max_iterations < 0 || !(options.gradient_tolerance >= 0.0) ||
      !(options.penalty_tolerance >= 0.0)) {
    fail_input("L-BFGS: history {}, iteration limit {} and tolerances {} and {} are not usable", options.history,
               options.max_iterations, options.gradient_tolerance, options.penalty_tolerance);
  }
  const int64_t problems = start.size(0);
  Point point = evaluate(objective, start.clone(), at::arange(problems, start.options().dtype(at::kLong)));
  at::TensorOptions row_options = point.f.options();
  // A problem whose gradient is zero at the start is solved there (the norm is kept positive for the ratio).
  at::Tensor start_norm = point.g.norm(2, {1}).clamp_min(std::numeric_limits<double>::min());
  at::Tensor active = at::ones({problems}, row_options.dtype(at::kBool));
  at::Tensor iterations = at::zeros({problems}, row_options.dtype(at::kLong));
  std::vector<Stop> stops(static_cast<size_t>(problems), Stop::kRunning);
  History history(problems, options.history, row_options);
  const ConvergenceBound bound(objective, start_norm, options);
  for (int64_t iteration = 0; iteration <= options.max_iterations; ++iteration) {
    at::Tensor gradient_norm = point.g.norm(2, {1});
    at::Tensor converged = active & (gradient_norm <= bound.at(point.x));
    std::vector<uint8_t> done = host_mask(converged);
    for (size_t k = 0; k < done.size(); ++k) stops[k] = done[k] ? Stop::kConverged : stops[k];
    active &= ~converged;
    if (iteration == options.max_iterations || !active.any().item<bool>()) break;

    at::Tensor rows = active.nonzero().flatten();
    at::Tensor d = history.direction(point.g, rows);
    at::Tensor step = at::where(history.empty_rows(), (1.0 / gradient_norm).clamp_max(1.0), at::ones_like(gradient_norm));
    Moves moves = step_along(objective, point, rows, d, step.index_select(0, rows), (iteration + 1) % kRescoreEvery == 0);
    at::Tensor found = at::zeros_like(active).index_fill_(0, moves.rows, true);
    at::Tensor stalled = active & ~found;
    std::vector<uint8_t> stalled_here = host_mask(stalled);
    std::vector<uint8_t> within = host_mask(stalled & (gradient_norm <= bound.at_rounding_limit(point.x)));
    for (size_t k = 0; k < stalled_here.size(); ++k) {
      if (stalled_here[k]) stops[k] = within[k] ? Stop::kRoundingLimit : Stop::kStalled;
    }
    history.add(moves.rows, moves.s, moves.y);
    iterations += found.to(at::kLong);
    active &= found;
  }
  return {point.x, outcomes(point, start_norm, bound.at(point.x), iterations, stops)};
}

}  // namespace probekit::probes::solvers
